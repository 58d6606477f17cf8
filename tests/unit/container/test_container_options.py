"""`acbslurm run`'s argument handling (no Docker needed: it refuses before connecting)."""

import os
import re
import resource
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

from acbslurm.cli.container import run
from acbslurm.container.options import (
    GpuNotAllocated,
    Limits,
    OptionError,
    Publish,
    parse_env,
    parse_gpus,
    parse_hostname,
    parse_mount,
    parse_publish,
    parse_size,
    port_free,
    port_range,
    resolve_gpus,
    resolve_grace,
    resolve_limits,
)
from acbslurm.errors import ConfigError
from acbslurm.gpuvalue import Gpu, from_lists
from acbslurm.jobrecord import JobRecord, write_record
from acbslurm.mountrules import (
    lexical,
    mount_problem,
    parse_mountinfo,
    path_problem,
    source_problem,
)

UUID_A = "GPU-aaaaaaaa-0000-0000-0000-000000000001"
UUID_B = "GPU-bbbbbbbb-0000-0000-0000-000000000002"
REC = JobRecord("9", "root", os.getuid(), "n1", from_lists("n1", [0], ["GPU-aaaa"], [0]), 2, 1024)


def test_parse_mount(tmp_path: Path) -> None:
    m = parse_mount(f"{tmp_path}:/data:ro")
    assert (m.source, m.target, m.read_only, m.bind()) == (
        str(tmp_path),
        "/data",
        True,
        f"{tmp_path}:/data:ro",
    )
    assert parse_mount(".:/w", cwd=str(tmp_path)).source == str(tmp_path)
    for bad, msg in [
        ("/x", "expected SRC:DST"),
        (f"{tmp_path}:rel", "absolute"),
        (f"{tmp_path}:/d:rx", "mode must be ro or rw"),
        ("/does/not/exist:/d", "does not exist"),
        ("/dev/null:/dev/nvidia0", "is a device path: GPUs come only via --gpus"),
        ("/dev:/d", "is a device path"),
        ("/dev/shm/../:/d", "is a device path"),
    ]:
        with pytest.raises(OptionError, match=msg):
            parse_mount(bad)


ROOT = "is the root directory, which contains /dev (a bind mount is recursive"


def test_mount_refuses_every_way_to_reach_dev(tmp_path: Path) -> None:
    (tmp_path / "to-root").symlink_to("/")
    (tmp_path / "to-dev").symlink_to("/dev")
    (tmp_path / "to-proc").symlink_to("/proc/self")
    (tmp_path / "sub").mkdir()
    for src, why in [
        ("/", ROOT),
        ("//", ROOT),
        ("///", ROOT),
        ("/./", ROOT),
        ("/tmp/..", ROOT),
        ("/tmp/../", ROOT),
        (f"{tmp_path}/to-root", ROOT),
        (f"{tmp_path}/sub/../to-root/", ROOT),
        ("/dev/../dev", "is a device path"),
        ("//dev", "is a device path"),
        (f"{tmp_path}/to-dev", "is a device path"),
        (f"{tmp_path}/to-root/dev/null", "is a device path"),
        ("/proc", "is under /proc (/proc/<pid>/root"),
        ("/proc/self/root", ROOT),  # resolves to the caller's root: /
        ("/proc/1", "is under /proc"),
        (f"{tmp_path}/to-proc", "is under /proc"),
    ]:
        with pytest.raises(OptionError) as exc:
            parse_mount(f"{src}:/host:ro", mounts=[])
        msg = str(exc.value)
        assert why in msg, (src, msg)
        assert f"(from '{src}:/host:ro'" in msg and msg.endswith("GPUs come only via --gpus")
    with pytest.raises(OptionError) as exc:
        parse_mount(f"{tmp_path}/to-root:/h", mounts=[])
    assert (
        f"source '{tmp_path}/to-root' (from '{tmp_path}/to-root:/h', resolved: '/') is the root"
        in str(exc.value)
    )


def test_mount_allows_paths_that_only_look_like_dev(tmp_path: Path) -> None:
    for name in ("dev", "devices", "proc"):
        (tmp_path / name).mkdir()
        assert parse_mount(f"{tmp_path}/{name}:/x", mounts=[]).source == f"{tmp_path}/{name}"
    assert parse_mount("/sys:/hostsys:ro", mounts=[]).source == "/sys"
    for path in ("/devices", "/dev2", "/device", "/proc2", "/sys", "/sys/class/drm", "/tmp"):
        assert source_problem(path) is None, path
        assert path_problem(lexical(path)) is None, path


def test_mount_binds_the_resolved_source(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "data")
    m = parse_mount(f"{tmp_path}/link/../link:/d", mounts=[])
    assert m.bind() == f"{tmp_path}/data:/d:rw"


MOUNTINFO = r"""22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
23 22 0:5 / /dev rw,nosuid shared:2 - devtmpfs udev rw,size=4096k
24 22 0:21 / /proc rw,nosuid - proc proc rw
25 22 0:22 / /sys rw,nosuid shared:7 - sysfs sysfs rw
40 22 0:5 / /srv/chroot\040a/dev rw shared:2 - devtmpfs udev rw
41 22 0:21 / /srv/chroot\040a/proc rw - proc proc rw
42 22 0:5 /nvidia0 /opt/gpu0 rw - devtmpfs udev rw
"""


def test_mount_refuses_device_file_systems_mounted_elsewhere() -> None:
    mounts = parse_mountinfo(MOUNTINFO)
    assert mounts[4] == ("/srv/chroot a/dev", "devtmpfs")
    assert mount_problem("/srv/chroot a", mounts) == (
        "has a devtmpfs file system mounted at '/srv/chroot a/dev' below it "
        "(a bind mount is recursive)"
    )
    assert "devtmpfs" in (mount_problem("/srv", mounts) or "")
    assert mount_problem("/srv/chroot a/dev/dri", mounts) == (
        "is on a devtmpfs file system (mounted at '/srv/chroot a/dev')"
    )
    assert "proc file system" in (mount_problem("/srv/chroot a/proc/1", mounts) or "")
    assert "devtmpfs" in (mount_problem("/opt", mounts) or "")
    for ok in ("/srv/chroot", "/srv/chroot a/etc", "/opt/gpu", "/sys", "/home"):
        assert mount_problem(ok, mounts) is None, ok
    assert parse_mountinfo("garbage\n1 2 3\n") == []


def test_cli_refuses_root_mount_as_a_user_error(
    in_job: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from acbslurm.cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(["run", "--gpus", "none", "--mount", "/tmp/..:/host", "img", "true"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "Error: Invalid value for '--mount': source '/' (from '/tmp/..:/host')" in err
    assert ROOT in err


def test_parse_env_size_gpus() -> None:
    assert parse_env("A_1=x=y") == ("A_1", "x=y")
    with pytest.raises(OptionError, match="'1A=x'"):
        parse_env("1A=x")
    assert parse_size("512m") == 512 * 1024**2
    assert parse_size("2GB") == 2 * 1024**3
    assert parse_size("100") == 100
    with pytest.raises(OptionError, match="'lots'"):
        parse_size("lots")
    assert parse_gpus("auto") == "auto"
    assert parse_gpus("GPU-a1,MIG-b2") == ["GPU-a1", "MIG-b2"]
    with pytest.raises(OptionError, match="'0'"):
        parse_gpus("0")
    with pytest.raises(OptionError, match="twice"):
        parse_gpus("GPU-a,GPU-a")


def test_resolve_gpus_refuses_what_slurm_did_not_give() -> None:
    assert resolve_gpus("auto", REC) == REC.gpus == (Gpu("GPU-aaaa", 0, 0, "n1"),)
    assert resolve_gpus("none", REC) == ()
    assert resolve_gpus(["GPU-aaaa"], REC) == REC.gpus
    with pytest.raises(GpuNotAllocated, match="GPU-bbbb was not given to job 9"):
        resolve_gpus(["GPU-bbbb"], REC)
    with pytest.raises(GpuNotAllocated, match="no job record"):
        resolve_gpus(["GPU-aaaa"], None)
    assert resolve_gpus("auto", None) == ()


def test_limits_default_to_the_allocation_and_never_exceed_it() -> None:
    assert resolve_limits(None, None, REC) == Limits(2 * 10**9, 1024 * 1024**2)
    assert resolve_limits(0.5, "256m", REC) == Limits(5 * 10**8, 256 * 1024**2)
    with pytest.raises(OptionError, match="more than the job's 2 CPUs"):
        resolve_limits(3, None, REC)
    with pytest.raises(OptionError, match="more than the job's 1024 MB"):
        resolve_limits(None, "2g", REC)
    assert resolve_limits(None, None, None) == Limits()


@pytest.fixture
def in_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    write_record(str(tmp_path), REC)
    monkeypatch.setenv("ACBSLURM_RECORD_DIR", str(tmp_path))
    monkeypatch.setenv("ACBSLURM_CONFIG", str(tmp_path / "none.yaml"))
    (tmp_path / "none.yaml").write_text("{}\n")
    monkeypatch.setenv("SLURM_JOB_ID", "9")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no.sock")
    return tmp_path


def test_cli_refuses_foreign_uuid_with_exit_2(in_job: Path) -> None:
    res = CliRunner().invoke(run, ["--gpus", "GPU-bbbb", "img", "true"])
    assert res.exit_code == 2
    assert "GPU-bbbb was not given to job 9 by Slurm (it has: GPU-aaaa)" in res.output


def test_cli_bad_values_exit_2(in_job: Path) -> None:
    for args, msg in [
        (["--mount", "/nope:/x", "img"], "'/nope' (from '/nope:/x') does not exist"),
        (["--env", "=x", "img"], "KEY=VALUE"),
        (["--workdir", "rel", "img"], "absolute path"),
        (["--cpus", "8", "img"], "more than the job's 2 CPUs"),
    ]:
        res = CliRunner().invoke(run, args)
        assert res.exit_code == 2, res.output
        assert msg in res.output


def test_cli_names_the_missing_daemon(in_job: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from acbslurm.cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(["run", "--gpus", "none", "img", "true"])
    assert exc.value.code == 3
    err = capsys.readouterr().err
    assert err.startswith("Error: no Docker daemon is running at unix://")
    assert "dockerd-rootless.sh" in err


def test_cli_refuses_gpus_outside_the_job_it_names(in_job: Path) -> None:
    # SLURM_JOB_ID=9 is only a variable here: no slurmstepd of job 9 is a parent.
    res = CliRunner().invoke(run, ["img", "true"])
    assert res.exit_code == 2
    assert "this process is not part of Slurm job 9" in res.output


def test_no_slurmstepd_above_a_plain_process() -> None:
    from acbslurm.procfs import stepd_job_of_ancestors

    assert stepd_job_of_ancestors() is None


@pytest.mark.parametrize(
    ("args", "msg"),
    [
        (["--cpus", "nan"], "'--cpus': 'nan' is not a finite number"),
        (["--cpus", "inf"], "'--cpus': 'inf' is not a finite number"),
        (["--cpus", "-inf"], "'--cpus': '-inf' is not a finite number"),
        (["--grace", "inf"], "'--grace': 'inf' is not a finite number"),
        (["--grace", "nan"], "'--grace': 'nan' is not a finite number"),
        # Docker reads NanoCpus 0 as no limit at all
        (["--cpus", "1e-12"], "'--cpus': must be at least 0.000000001 (1e-9), got 1e-12"),
    ],
)
def test_cli_refuses_non_finite_numbers(in_job: Path, args: list[str], msg: str) -> None:
    # Before: nan/inf CPUs ended in a traceback (int(nan)); an infinite grace was
    # accepted, and then SIGTERM never stopped the container.
    res = CliRunner().invoke(run, [*args, "img", "true"])
    assert res.exit_code == 2, res.output
    assert isinstance(res.exception, SystemExit)  # a usage error, not a traceback
    assert f"Invalid value for {msg}" in res.output


def test_non_finite_limits_and_grace_are_option_errors() -> None:
    for bad in (float("nan"), float("inf")):
        with pytest.raises(OptionError, match="finite") as cpus:
            resolve_limits(bad, None, REC)
        assert cpus.value.option == "--cpus"
        with pytest.raises(OptionError, match="finite") as grace:
            resolve_grace(bad, 5.0)
        assert grace.value.option == "--grace"
    assert resolve_grace(None, 5.0) == 5.0
    with pytest.raises(OptionError, match=r"at least 0\.000000001") as tiny:
        resolve_limits(1e-12, None, REC)
    assert tiny.value.option == "--cpus"
    assert resolve_limits(1e-9, None, REC).nano_cpus == 1
    assert resolve_grace(0, 5.0) == 0


@pytest.mark.parametrize(
    "name", ["NVIDIA_VISIBLE_DEVICES", "NVIDIA_MIG_CONFIG_DEVICES", "NVIDIA_IMEX_CHANNELS"]
)
def test_env_that_chooses_gpus_is_refused(name: str) -> None:
    with pytest.raises(OptionError, match=f"{name} is refused: NVIDIA_"):
        parse_env(f"{name}=all")


def test_env_that_only_narrows_the_toolkit_is_allowed() -> None:
    assert parse_env("NVIDIA_DRIVER_CAPABILITIES=compute,utility")[0] == (
        "NVIDIA_DRIVER_CAPABILITIES"
    )
    assert parse_env("NVIDIA_REQUIRE_CUDA=cuda>=12.0") == ("NVIDIA_REQUIRE_CUDA", "cuda>=12.0")
    assert parse_env("CUDA_VISIBLE_DEVICES=0") == ("CUDA_VISIBLE_DEVICES", "0")


def test_cli_refuses_nvidia_visible_devices_with_exit_2(in_job: Path) -> None:
    res = CliRunner().invoke(run, ["--env", "NVIDIA_VISIBLE_DEVICES=all", "img", "true"])
    assert res.exit_code == 2
    assert "NVIDIA_VISIBLE_DEVICES is refused" in res.output


@pytest.mark.parametrize(
    "name", ["ACBSLURM_JOB_ID", "ACBSLURM_GPU_UUIDS", "ACBSLURM_CONFIG", "acbslurm_job_id"]
)
def test_env_that_names_acbslurm_is_refused(name: str) -> None:
    # The epilog finds a job's processes by ACBSLURM_JOB_ID in their environment: a user
    # who set it could hide a container from the cleanup or point another job's at it.
    with pytest.raises(OptionError, match=f"{name} is refused: ACBSLURM_") as info:
        parse_env(f"{name}=1")
    assert info.value.option == "--env"


def test_cli_refuses_acbslurm_job_id_with_exit_2(in_job: Path) -> None:
    res = CliRunner().invoke(run, ["--env", "ACBSLURM_JOB_ID=1", "img", "true"])
    assert res.exit_code == 2, res.output
    assert "Invalid value for '--env': ACBSLURM_JOB_ID is refused" in res.output
    assert "Traceback" not in res.output


def test_a_bare_env_name_takes_its_value_here_or_is_left_out() -> None:
    """As `docker run -e KEY`: a spec's job-level env reaches the container this way."""
    assert parse_env("OMP_NUM_THREADS", {"OMP_NUM_THREADS": "8"}) == ("OMP_NUM_THREADS", "8")
    assert parse_env("OMP_NUM_THREADS", {}) is None
    with pytest.raises(OptionError, match="got '1A'"):
        parse_env("1A", {})


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        ("all", "auto"),
        ("auto", "auto"),
        ("device=0,1", ["0", "1"]),
        ('"device=1"', ["1"]),
        (f"device={UUID_A}", [UUID_A]),
    ],
)
def test_dockers_gpu_words_mean_the_jobs_gpus(spec: str, want: object) -> None:
    assert parse_gpus(spec) == want


def test_a_gpu_count_says_what_a_job_gives() -> None:
    with pytest.raises(OptionError, match=r"a count \('2'\).*--gpus auto.*device=0,1"):
        parse_gpus("2")


def test_gpus_by_index_are_the_jobs_in_order_and_never_more() -> None:
    rec = JobRecord("5", "u", 1000, "n1", from_lists("n1", [0, 1], [UUID_A, UUID_B], []))
    assert [g.uuid for g in resolve_gpus(["1"], rec)] == [UUID_B]
    assert [g.uuid for g in resolve_gpus(["1", "0"], rec)] == [UUID_B, UUID_A]
    assert [g.index for g in resolve_gpus(["1", "0"], rec)] == [1, 0]
    with pytest.raises(GpuNotAllocated, match=r"has 2 GPU\(s\) here \(indices 0-1\), not 2"):
        resolve_gpus(["2"], rec)
    with pytest.raises(GpuNotAllocated, match="twice"):
        resolve_gpus(["0", UUID_A], rec)


@pytest.mark.parametrize("name", ["node-1", "a.b.c", "x" * 63])
def test_a_hostname_is_checked(name: str) -> None:
    assert parse_hostname(name) == name


@pytest.mark.parametrize("name", ["-a", "a_b", "a..b", "x" * 64, "a b", ""])
def test_a_bad_hostname_is_refused_quoted(name: str) -> None:
    with pytest.raises(OptionError, match="expected a host name"):
        parse_hostname(name)


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        ("8888", Publish(8888, 0)),
        ("18888:8888", Publish(8888, 18888)),
        ("127.0.0.1:18888:8888/udp", Publish(8888, 18888, "127.0.0.1", "udp")),
        ("127.0.0.1::8888", Publish(8888, 0, "127.0.0.1")),
        ("[::1]:18888:8888", Publish(8888, 18888, "::1")),
    ],
)
def test_publish_as_docker_takes_it(spec: str, want: Publish) -> None:
    assert parse_publish(spec, (1024, 65535)) == want


@pytest.mark.parametrize(
    ("spec", "allowed", "says"),
    [
        ("http", (1024, 65535), "expected [IP:][HOST_PORT:]CONTAINER_PORT"),
        ("80:8888", (1024, 65535), "outside this site's 1024-65535: rootless Docker cannot"),
        ("30000:80", (20000, 29999), "port 30000 (from '30000:80') is outside"),
        ("0", (1024, 65535), "ports are 1-65535"),
        ("18888:8888", None, "publishes no ports"),
    ],
)
def test_a_bad_publish_is_refused_quoted(
    spec: str, allowed: tuple[int, int] | None, says: str
) -> None:
    with pytest.raises(OptionError, match=re.escape(says)):
        parse_publish(spec, allowed)


def test_the_publish_range_setting() -> None:
    assert port_range("1024-65535") == (1024, 65535)
    assert port_range("") is None
    with pytest.raises(ConfigError, match="publish_ports"):
        port_range("high")


def test_a_port_that_listens_is_taken() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        assert not port_free(Publish(80, port, "127.0.0.1"))
    assert port_free(Publish(80, port, "127.0.0.1"))


@pytest.mark.parametrize(
    ("texts", "want"),
    [
        (["memlock=-1"], [("memlock", -1, -1)]),
        (["memlock=unlimited"], [("memlock", -1, -1)]),
        (["nofile=1024:4096"], [("nofile", 1024, 4096)]),
        (["nofile=64"], [("nofile", 64, 64)]),
        (["nofile=10", "nofile=20"], [("nofile", 20, 20)]),  # the last wins, as in docker
        (["stack=8388608:-1"], [("stack", 8388608, -1)]),
    ],
)
def test_ulimits_within_the_jobs_hard_limits(texts: list[str], want: list[tuple]) -> None:
    from acbslurm.container.options import parse_ulimits

    got = parse_ulimits(texts, node_hard=lambda res: -1)
    assert [(u.name, u.soft, u.hard) for u in got] == want


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("memlock", "expected NAME=SOFT[:HARD]"),
        ("memlok=1", "with NAME one of core, cpu, data"),
        ("nofile=", "got 'nofile='"),
        ("nofile=1k", "got 'nofile=1k'"),
        ("nofile=-2", "got 'nofile=-2'"),
        ("nofile=\uff11\uff12", "got 'nofile=\uff11\uff12'"),  # not ASCII digits
        ("nofile=9:8", "the soft limit is above the hard one in 'nofile=9:8'"),
        ("nofile=-1:8", "the soft limit is above the hard one in 'nofile=-1:8'"),
        (
            "memlock=1024:9999999",
            "memlock's hard limit 9999999 (from 'memlock=1024:9999999') is above this job's "
            "8388608 on this node",
        ),
        ("nofile=4096:5000", "nofile's hard limit 5000 (from 'nofile=4096:5000') is above"),
    ],
)
def test_bad_ulimits_name_the_value(text: str, message: str) -> None:
    """Refused before anything starts: a container never gets more than the job."""
    from acbslurm.container.options import parse_ulimits

    hard = {resource.RLIMIT_MEMLOCK: 8388608, resource.RLIMIT_NOFILE: 4096}
    with pytest.raises(OptionError) as info:
        parse_ulimits([text], node_hard=lambda res: hard.get(res, -1))
    assert info.value.option == "--ulimit"
    assert message in str(info.value), str(info.value)


def test_no_limit_is_the_jobs_own_where_the_node_has_one() -> None:
    """`memlock: -1` (docs/multi-node.md's example) on a node whose job limit is 8 MiB:
    the container gets 8 MiB, and the job's output says so and what to ask for; a
    soft limit below it stays."""
    from acbslurm.container.options import parse_ulimits

    hard = {resource.RLIMIT_MEMLOCK: 8388608}
    told: list[str] = []
    got = parse_ulimits(
        ["memlock=-1", "stack=1024:unlimited"],
        node_hard=lambda res: hard.get(res, 65536),
        said=told.append,
    )
    assert [(u.name, u.soft, u.hard) for u in got] == [
        ("memlock", 8388608, 8388608),
        ("stack", 1024, 65536),
    ]
    assert told[0] == (
        "acbslurm: --ulimit memlock=-1 asks for no memlock limit, but this job's hard limit "
        "on this node is 8388608 (`ulimit -H`): the container gets 8388608; ask the site to "
        "raise it (docs/multi-node.md, Locked memory)"
    )


@pytest.mark.parametrize("code", ["0", "125", "126", "127", "256", "-1", "x", "\uff18\uff15"])
def test_requeue_exit_is_a_code_a_program_chooses(code: str) -> None:
    """Not success, nor Docker's own codes (the daemon failed, the command could not be
    run or found): refused before anything starts, exit 2, the value quoted."""
    res = CliRunner().invoke(run, ["--requeue-exit", code, "busybox"])
    assert res.exit_code == 2, res.output
    assert "Invalid value for '--requeue-exit'" in res.output, res.output
    assert repr(code) in res.output, res.output


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--network", "container:web"], "'container:web' joins another container's network"),
        (["--net", "ns:/proc/1/ns/net"], "'ns:/proc/1/ns/net' joins another container's"),
        (["--network", "a b"], "expected bridge (Docker's default), host, none, or a network"),
        (["--network", "host", "-p", "8080"], "with --network host there is nothing to publish"),
        (["--network", "none", "-p", "8080"], "with --network none there is nothing to publish"),
        (["--network", "host", "--hostname", "h"], "the host network keeps the node's own"),
    ],
)
def test_networks_that_are_not_the_jobs_are_refused(argv: list[str], message: str) -> None:
    """Refused before anything starts (exit 2), the value quoted: never another
    container's namespace, nor options the network leaves no sense in."""
    res = CliRunner().invoke(run, [*argv, "busybox"])
    assert res.exit_code == 2, res.output
    assert message in " ".join(res.output.split()), res.output


def test_the_networks_a_job_may_use() -> None:
    from acbslurm.container.options import parse_network

    for name in ("bridge", "host", "none", "my-net_2.a"):
        assert parse_network(name) == name


@pytest.mark.parametrize(
    ("text", "allowed", "want"),
    [
        ("/dev/null", ["/dev/null"], ("/dev/null", "/dev/null", "rwm")),
        ("/dev/null:/dev/x:r", ["/dev/null"], ("/dev/null", "/dev/x", "r")),
        ("/dev/null:rw", ["/dev/null"], ("/dev/null", "/dev/null", "rw")),
        ("/dev/zero", ["/dev"], ("/dev/zero", "/dev/zero", "rwm")),  # a directory's devices
    ],
)
def test_a_device_the_site_lists(text: str, allowed: list[str], want: tuple) -> None:
    from acbslurm.container.options import parse_device

    (d,) = parse_device(text, allowed)
    assert (d.host, d.container, d.perms) == want
    assert d.api() == {
        "PathOnHost": want[0],
        "PathInContainer": want[1],
        "CgroupPermissions": want[2],
    }


@pytest.mark.parametrize(
    ("text", "allowed", "gpus", "message"),
    [
        (
            "/dev/zero",
            ["/dev/null"],
            [],
            "'/dev/zero' (from '/dev/zero') is not among this site's devices (setting "
            "container_devices: /dev/null)",
        ),
        ("/dev/zero", [], [], "(setting container_devices: none)"),
        ("/etc/passwd", ["/etc"], [], "'/etc/passwd' (from '/etc/passwd') is not a device file"),
        ("/nope", ["/"], [], "'/nope' (from '/nope') does not exist"),
        ("dev/null", ["/dev"], [], "expected /HOST[:/CONTAINER][:rwm], got 'dev/null'"),
        (
            "/dev/null:/x:rwx",
            ["/dev"],
            [],
            "permissions are some of r, w, m, got '/dev/null:/x:rwx'",
        ),
        ("/dev/null:/x:rr", ["/dev"], [], "permissions are some of r, w, m"),
        (
            "/dev/null",
            ["/dev"],
            ["/dev/null"],
            "'/dev/null' (from '/dev/null') is a GPU's: GPUs come only as the job's (--gpus)",
        ),
    ],
)
def test_a_device_outside_the_list_or_a_gpus_is_refused(
    text: str, allowed: list[str], gpus: list[str], message: str
) -> None:
    """A GPU's device file is refused whatever the site lists: the job's GPUs come
    only from Slurm (here /dev/null stands for one the fence knows)."""
    from acbslurm.container.options import parse_device

    with pytest.raises(OptionError) as info:
        parse_device(text, allowed, gpus)
    assert info.value.option == "--device"
    assert message in str(info.value), str(info.value)


def test_the_sites_device_list_is_resolved() -> None:
    from acbslurm.container.options import allowed_devices

    assert allowed_devices("") == []
    assert allowed_devices(" /dev/infiniband , /dev/null,") == ["/dev/infiniband", "/dev/null"]


def test_a_folder_of_devices_gives_each_of_them(tmp_path: Path) -> None:
    """As `docker run --device /dev/infiniband`: every device file in the folder, each
    checked (here /dev/net, whose tun every Linux machine has)."""
    from acbslurm.container.options import parse_device

    got = parse_device("/dev/net:/dev/n", ["/dev/net"])
    assert [(d.host, d.container) for d in got] == [("/dev/net/tun", "/dev/n/tun")]
    with pytest.raises(OptionError, match="is not among this site's devices"):
        parse_device("/dev/net", ["/dev/null"])
    with pytest.raises(OptionError, match="holds no device file"):
        parse_device(str(tmp_path), [str(tmp_path)])
