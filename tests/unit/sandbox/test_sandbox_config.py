"""The sandbox's generated configuration, without starting anything."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from acbslurm.gpu.inventory import GpuInfo, sandbox_uuid
from acbslurm.sandbox import render
from acbslurm.sandbox.layout import Layout, Params


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    lay = Layout(tmp_path / "sb")
    for d in (lay.etc, lay.libexec, lay.bin):
        d.mkdir(parents=True)
    return lay


def _gpus(lay: Layout, p: Params) -> dict[str, list[GpuInfo]]:
    """Each node's GPUs, minors unique across the nodes (as gpus.create makes them)."""
    out = {}
    for k, node in enumerate(p.node_names):
        minors = range(k * p.gpus, (k + 1) * p.gpus)
        out[node] = [
            GpuInfo(
                m - k * p.gpus, m, sandbox_uuid(str(lay.root), m), device=f"{lay.dev}/nvidia{m}"
            )
            for m in minors
        ]
    return out


def test_slurm_conf_has_the_seed_settings(layout: Layout) -> None:
    p = Params(gpus=3, node="gpuserver", port_base=20000)
    render.write_slurm_configs(layout, p, _gpus(layout, p), "s3cret-pw")
    conf = layout.slurm_conf.read_text()
    for line in (
        "AccountingStorageTRES=gres/gpu",
        "GresTypes=gpu",
        "SelectType=select/cons_tres",
        "PrologFlags=Alloc",
        "SlurmctldPort=20000",
        "SlurmdPort=20001",
        "FirstJobId=10000001",
        "AccountingStoragePort=20002",
        "PartitionName=p1 Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES "
        "PriorityTier=1 GraceTime=15",
        "PartitionName=urgent Nodes=ALL MaxTime=INFINITE State=UP Hidden=YES PriorityTier=2 "
        "PreemptMode=OFF",
        "PreemptType=preempt/partition_prio",
        "PreemptMode=REQUEUE",
    ):
        assert line in conf.splitlines(), line
    assert "Gres=gpu:3" in conf
    assert f"Prolog={layout.libexec}/acbslurm-prolog" in conf
    gres = [ln for ln in layout.gres_conf.read_text().splitlines() if ln.startswith("NodeName")]
    assert gres == [f"NodeName=gpuserver Name=gpu File={layout.dev}/nvidia{i}" for i in range(3)]
    # The database password is only in the mode-600 slurmdbd.conf.
    assert "s3cret-pw" not in conf
    assert "StoragePass=s3cret-pw" in layout.slurmdbd_conf.read_text()
    assert layout.slurmdbd_conf.stat().st_mode & 0o777 == 0o600
    assert "StoragePort=20003" in layout.slurmdbd_conf.read_text()


def test_uuids_are_deterministic_and_well_formed(layout: Layout) -> None:
    a = sandbox_uuid("/x", 0)
    assert a == sandbox_uuid("/x", 0)
    assert a != sandbox_uuid("/x", 1) != sandbox_uuid("/y", 1)
    parts = a.split("-")
    assert parts[0] == "GPU" and [len(x) for x in parts[1:]] == [8, 4, 4, 4, 12]


def test_hook_wrapper_runs_the_named_hook(layout: Layout, tmp_path: Path) -> None:
    import sys

    pkg = tmp_path / "fake" / "acbslurm" / "hooks"
    pkg.mkdir(parents=True)
    (pkg.parent / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "prolog.py").write_text(
        "import os, sys\n"
        "def prolog_main():\n    print('prolog', os.environ['ACBSLURM_CONFIG'])\n"
        "    print('acbslurm-prolog: error: job 5: why', file=sys.stderr); return 7\n"
        "def epilog_main():\n    return 0\n"
        "def task_prolog_main():\n    return 0\n"
    )
    p = Params(python=sys.executable, pythonpath=str(tmp_path / "fake"))
    layout.log.mkdir(parents=True)
    render.write_hook_wrappers(layout, p)
    r = subprocess.run([str(layout.libexec / "acbslurm-prolog")], capture_output=True, text=True)
    assert r.returncode == 7
    assert r.stdout.strip() == f"prolog {layout.acbslurm_conf}"
    # stderr as slurmd sees it, and also in the hooks log (the sandbox has no syslog).
    assert r.stderr == "acbslurm-prolog: error: job 5: why\n"
    assert layout.log_file("hooks").read_text() == "acbslurm-prolog: error: job 5: why\n"
    # Its time, for bench/scale_bench.py: hook, job (none here), exit code, milliseconds.
    hook, job, code, ms = layout.log_file("hook-times").read_text().split()
    assert (hook, job, code) == ("acbslurm-prolog", "-", "7") and 0 < float(ms) < 10_000


def test_on_the_package_the_wrapper_runs_its_hook_file(layout: Layout, tmp_path: Path) -> None:
    """ACBSLURM_INSTALLED=1 (CI's package leg): slurm.conf's hooks are chaining wrappers
    that run the package's hook files, the users' daemons get its runtime, and jobs its
    acbslurm."""
    import sys

    hooks = tmp_path / "libexec"
    hooks.mkdir()
    for name in render.HOOKS:
        (hooks / name).write_text(
            "import os, sys\nprint(os.environ['ACBSLURM_CONFIG'], sys.argv[0])\nsys.exit(3)\n"
        )
    (hooks / "acbslurm-runc").write_text("#!/bin/sh\n")
    p = Params(python=sys.executable, pythonpath=str(tmp_path), hooks_dir=str(hooks))
    layout.log.mkdir(parents=True)
    render.write_hook_wrappers(layout, p)
    r = subprocess.run([str(layout.libexec / "acbslurm-epilog")], capture_output=True, text=True)
    assert r.returncode == 3
    assert r.stdout.split() == [str(layout.acbslurm_conf), str(hooks / "acbslurm-epilog")]
    hook, _, code, _ = layout.log_file("hook-times").read_text().split()
    assert (hook, code) == ("acbslurm-epilog", "3")
    render.write_oci_runtime(layout, p)
    assert os.readlink(layout.oci_runtime) == str(hooks / "acbslurm-runc")
    render.write_acbslurm_settings(layout, p)
    settings = json.loads(layout.acbslurm_conf.read_text())
    assert settings["node_acbslurm"] == str(Path(sys.executable).parent / "acbslurm")
    render.write_acbslurm_settings(layout, Params())
    assert "node_acbslurm" not in json.loads(layout.acbslurm_conf.read_text())


def test_installed_is_refused_without_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    from acbslurm.errors import SetupError
    from acbslurm.sandbox import cluster

    monkeypatch.setenv("ACBSLURM_INSTALLED", "1")
    monkeypatch.setattr(cluster, "INSTALLED_HOOKS", "/nonexistent/libexec/acbslurm")
    with pytest.raises(SetupError, match="the Debian package is not installed"):
        cluster.acbslurm_source()
    monkeypatch.setenv("ACBSLURM_INSTALLED", "0")
    assert cluster.acbslurm_source()["hooks_dir"] == ""


def _run_standin_hook(
    layout: Layout, tmp_path: Path, visible: str
) -> subprocess.CompletedProcess[str]:
    layout.hook_record_dir.mkdir(parents=True, exist_ok=True)
    render.write_standin_hook(layout)
    bundle = tmp_path / "bundle"
    bundle.mkdir(exist_ok=True)
    config = {
        "process": {
            "args": ["sh", "-c", "echo NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES"],
            "env": ["PATH=/bin", f"NVIDIA_VISIBLE_DEVICES={visible}"],
        }
    }
    (bundle / "config.json").write_text(json.dumps(config))
    # No such process: the hook must never get as far as entering a namespace here.
    state = json.dumps({"id": "c0ffee", "bundle": str(bundle), "pid": 2**22 + 1})
    hook = layout.bin / "nvidia-container-runtime-hook"
    return subprocess.run([str(hook), "prestart"], input=state, capture_output=True, text=True)


def test_standin_hook_records_the_devices_docker_asked_for(layout: Layout, tmp_path: Path) -> None:
    # GPUs the sandbox does not have: recorded, then refused, as the real hook refuses
    # a device it cannot find (no node is injected).
    r = _run_standin_hook(layout, tmp_path, "GPU-a,GPU-b")
    assert r.returncode != 0 and "unknown device 'GPU-a'" in r.stderr
    rec = json.loads((layout.hook_record_dir / "c0ffee.json").read_text())
    assert rec["devices"] == "GPU-a,GPU-b"
    assert rec["hook_args"] == ["prestart"]


@pytest.mark.parametrize("visible", ["", "void", "none"])
def test_standin_hook_injects_nothing_for_no_gpus(
    layout: Layout, tmp_path: Path, visible: str
) -> None:
    r = _run_standin_hook(layout, tmp_path, visible)
    assert r.returncode == 0, r.stderr


def test_settings_file_is_read_by_load_settings(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    from acbslurm.config import load_settings

    render.write_acbslurm_settings(layout, Params(cluster="c1"))
    monkeypatch.setenv("ACBSLURM_CONFIG", str(layout.acbslurm_conf))
    s = load_settings()
    assert s.gpu_inventory == str(layout.inventory)
    assert s.docker_host.format(user="user1", uid=1001) == f"unix://{layout.run}/user1/docker.sock"
    assert s.cluster == "c1"


def test_password_files_are_never_readable_by_others(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mode is 600 before the password is written, even over a stale 644 temp file."""
    import os

    stale = layout.slurmdbd_conf.with_suffix(".conf.tmp")
    stale.write_text("old")
    stale.chmod(0o644)
    modes: list[int] = []
    real_fdopen = os.fdopen

    class Spy:
        def __init__(self, f: object) -> None:
            self.f = f

        def __enter__(self) -> Spy:
            return self

        def __exit__(self, *exc: object) -> None:
            self.f.close()  # type: ignore[attr-defined]

        def write(self, text: str) -> int:
            if "s3cret-pw" in text:
                modes.append(os.fstat(self.f.fileno()).st_mode & 0o777)  # type: ignore[attr-defined]
            return int(self.f.write(text))  # type: ignore[attr-defined]

    monkeypatch.setattr(os, "fdopen", lambda fd, *a, **kw: Spy(real_fdopen(fd, *a, **kw)))
    p = Params(gpus=1, node="n", port_base=20000)
    render.write_slurm_configs(layout, p, _gpus(layout, p), "s3cret-pw")
    render.write_report_db_cnf(layout, p, "s3cret-pw")
    assert modes == [0o600, 0o600]
    assert layout.report_db_cnf.stat().st_mode & 0o777 == 0o600
    assert not stale.exists()


def test_db_user_errors_never_show_the_passwords(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    from acbslurm.errors import CommandError, SetupError
    from acbslurm.sandbox import mariadb

    def failing_sql(_layout: Layout, statements: str, timeout: float = 30) -> str:
        near = statements.splitlines()[1][-60:]
        raise CommandError(["mariadb"], 1, "", f"ERROR 1064 (42000): syntax near '{near}'")

    monkeypatch.setattr(mariadb, "sql", failing_sql)
    with pytest.raises(SetupError) as exc:
        mariadb.create_users(layout, "pw-slurm-0123abcd", "pw-ro-4567ef")
    assert "ERROR 1064" in str(exc.value)
    assert "pw-slurm-0123abcd" not in str(exc.value) and "pw-ro-4567ef" not in str(exc.value)


def test_slurm_conf_of_a_built_release(layout: Layout) -> None:
    """25.11: CredType, gpumem/gpuutil accounted; the hooks get its bin. Every release:
    a GPU site's cgroup plugins, and cgroup.conf beside slurm.conf."""
    p = Params(gpus=2, node="n1", slurm_prefix="/cache/25.11.7/prefix", slurm_release="25.11.7")
    render.write_slurm_configs(layout, p, _gpus(layout, p), "pw")
    conf = layout.slurm_conf.read_text().splitlines()
    assert "CredType=cred/munge" in conf and "CryptoType=crypto/munge" not in conf
    assert "AccountingStorageTRES=gres/gpu,gres/gpumem,gres/gpuutil" in conf
    cgroup_lines = {
        "ProctrackType=proctrack/cgroup",
        "TaskPlugin=task/cgroup,task/affinity",
        "JobAcctGatherType=jobacct_gather/cgroup",
    }
    assert cgroup_lines <= set(conf)
    constrain = {"ConstrainCores=yes", "ConstrainRAMSpace=yes", "ConstrainDevices=yes"}
    assert constrain | {"CgroupPlugin=autodetect"} <= set(layout.cgroup_conf.read_text().split())
    old = Params(gpus=2, node="n1")
    render.write_slurm_configs(layout, old, _gpus(layout, p), "pw")
    conf = layout.slurm_conf.read_text().splitlines()
    assert "CryptoType=crypto/munge" in conf and cgroup_lines <= set(conf)
    assert constrain <= set(layout.cgroup_conf.read_text().split())
    render.write_acbslurm_settings(layout, p)
    settings = json.loads(layout.acbslurm_conf.read_text())
    assert settings["slurm_bin_dir"] == "/cache/25.11.7/prefix/bin"


def test_a_sandbox_dir_too_long_for_unix_sockets_is_refused_up_front() -> None:
    from acbslurm.errors import SetupError
    from acbslurm.sandbox import Sandbox

    with pytest.raises(SetupError, match=r"too long: rootless Docker's socket .* 109 bytes"):
        Sandbox("/var/lib/acbslurm/sb-slurmver-matrix-22.05.8-test-lifecycle")._check_socket_paths(
            Params()
        )
    Sandbox("/var/lib/acbslurm/sandbox-slurm-25.11.7-lc")._check_socket_paths(Params())


def test_several_nodes_each_have_a_port_spool_log_and_gpus(layout: Layout) -> None:
    p = Params(gpus=2, nodes=3, node="vm", port_base=20000)
    assert p.node_names == ["vm-1", "vm-2", "vm-3"]
    render.write_slurm_configs(layout, p, _gpus(layout, p), "pw")
    conf = layout.slurm_conf.read_text().splitlines()
    nodes = [ln for ln in conf if ln.startswith("NodeName=")]
    assert [ln.split()[0] for ln in nodes] == ["NodeName=vm-1", "NodeName=vm-2", "NodeName=vm-3"]
    # The first node keeps SlurmdPort; the others follow MariaDB's port.
    assert [ln.split()[2] for ln in nodes] == ["Port=20001", "Port=20004", "Port=20005"]
    assert all("Gres=gpu:2" in ln for ln in nodes)
    assert f"SlurmdSpoolDir={layout.state}/slurmd/%n" in conf
    assert f"SlurmdLogFile={layout.log}/slurmd-%n.log" in conf
    assert f"SlurmdPidFile={layout.run}/slurmd-%n.pid" in conf
    # Each node after the first reads its own copy, naming its own munged (one munged
    # decodes a launch credential once: the second slurmd would find it "replayed").
    assert "DebugFlags=NO_CONF_HASH" in conf
    assert f"AuthInfo=socket={layout.munge_socket},cred_expire=10" in conf
    two = (layout.etc / "slurm-vm-2.conf").read_text().splitlines()
    sock = layout.run / "munge-vm-2" / "munge.socket.2"
    assert (
        f"AuthInfo=socket={sock},cred_expire=10" in two and f"AccountingStoragePass={sock}" in two
    )
    assert [ln for ln in two if "munge" not in ln] == [ln for ln in conf if "munge" not in ln]
    gres = [ln for ln in layout.gres_conf.read_text().splitlines() if ln.startswith("NodeName")]
    assert gres[2:4] == [
        f"NodeName=vm-2 Name=gpu File={layout.dev}/nvidia2",
        f"NodeName=vm-2 Name=gpu File={layout.dev}/nvidia3",
    ]


def test_one_node_keeps_its_single_slurmd_lines(layout: Layout) -> None:
    p = Params(gpus=2, node="vm", port_base=20000)
    assert p.node_names == ["vm"]
    render.write_slurm_configs(layout, p, _gpus(layout, p), "pw")
    conf = layout.slurm_conf.read_text()
    assert f"SlurmdSpoolDir={layout.state}/slurmd\n" in conf and "%n" not in conf
    assert "NO_CONF_HASH" not in conf and not list(layout.etc.glob("slurm-*.conf"))
    assert "Port=" not in next(ln for ln in conf.splitlines() if ln.startswith("NodeName="))


def test_ports_of_sandboxes_100_apart_never_collide() -> None:
    from acbslurm.sandbox.layout import MAX_NODES

    def ports(base: int) -> set[int]:
        p = Params(nodes=MAX_NODES, node="vm", port_base=base)
        extra = {p.slurmctld_port, p.slurmdbd_port, p.mariadb_port}
        return {p.node_port(n) for n in p.node_names} | extra

    a, b = ports(17000), ports(17100)
    assert len(a) == MAX_NODES + 3 and not a & b
    assert max(a) < 17100


def test_node_settings_name_the_node_each_hook_runs_on(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two slurmd on one machine run hooks for the same job: each node's hooks and job
    steps get their own records, job directories and inventory (SLURMD_NODENAME)."""
    from acbslurm.config import load_settings

    p = Params(nodes=2, node="vm")
    render.write_acbslurm_settings(layout, p)
    monkeypatch.setenv("ACBSLURM_CONFIG", str(layout.acbslurm_conf))
    seen = {}
    for node in p.node_names:
        monkeypatch.setenv("SLURMD_NODENAME", node)
        seen[node] = load_settings()
    one, two = seen["vm-1"], seen["vm-2"]
    assert one.record_dir == f"{layout.records}/vm-1" and two.record_dir.endswith("/vm-2")
    assert one.job_runtime_dir == f"{layout.run}/job/vm-1"
    assert one.gpu_inventory == str(layout.etc / "gpus-vm-1.json")
    assert two.gres_conf == one.gres_conf  # one gres.conf with NodeName= lines
    # One node: the paths of a single-node sandbox, whatever SLURMD_NODENAME says.
    render.write_acbslurm_settings(layout, Params(node="vm"))
    assert load_settings().record_dir == str(layout.records)


def test_typed_gpus_get_gres_types_in_both_files(layout: Layout) -> None:
    p = Params(gpus=3, gpu_types="h200:1,a100:2", node="gpuserver", port_base=20000)
    render.write_slurm_configs(layout, p, _gpus(layout, p), "pw")
    assert "Gres=gpu:h200:1,gpu:a100:2 " in layout.slurm_conf.read_text()
    gres = [ln for ln in layout.gres_conf.read_text().splitlines() if ln.startswith("NodeName")]
    assert gres == [
        f"NodeName=gpuserver Name=gpu Type={t} File={layout.dev}/nvidia{i}"
        for i, t in enumerate(["h200", "a100", "a100"])
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("h200", "'h200' is not TYPE:COUNT"),
        ("h200:0", "'h200:0' is not TYPE:COUNT"),
        ("h 200:1", "'h 200:1' is not TYPE:COUNT"),
        ("h200:1,h200:1", "type 'h200' is named twice"),
        ("a:40,b:40", "80 GPUs per node; at most 64"),
    ],
)
def test_bad_gpu_types_are_named(text: str, message: str) -> None:
    from acbslurm.sandbox.layout import parse_gpu_types

    with pytest.raises(ValueError, match=message):
        parse_gpu_types(text)


def test_gpu_types_set_the_count_and_must_agree_with_gpus() -> None:
    from acbslurm.errors import ConfigError
    from acbslurm.sandbox.cluster import _gpu_shape

    base = Params(gpus=2, gpu_types="")
    assert _gpu_shape(base, None, "h200:1, a100:1")["gpu_types"] == "h200:1,a100:1"
    assert _gpu_shape(base, None, "h200:3")["gpus"] == 3
    assert _gpu_shape(Params(gpu_types="h200:2"), None, None) == {"gpu_types": "h200:2"}
    assert _gpu_shape(Params(gpu_types="h200:2"), 2, None) == {"gpu_types": ""}
    with pytest.raises(ConfigError, match=r"--gpus 2 and --gpu-types h200:1 \(1\) disagree"):
        _gpu_shape(base, 2, "h200:1")


def test_the_sandbox_passes_the_doctors_kill_wait(layout: Layout) -> None:
    # The container's grace (stop_grace, docker stop) must end within KillWait, or a
    # cancelled job's container is SIGKILLed first: the sandbox's own doctor says ok.
    from acbslurm.config import Settings
    from acbslurm.doctor.context import Context
    from acbslurm.doctor.slurmconf import SlurmConf, _read_file, check_kill_wait

    p = Params(gpus=2, node="vm", port_base=20000)
    render.write_slurm_configs(layout, p, _gpus(layout, p), "pw")
    render.write_acbslurm_settings(layout, p)
    settings = json.loads(layout.acbslurm_conf.read_text())
    conf = SlurmConf(str(layout.slurm_conf))
    _read_file(conf, str(layout.slurm_conf))
    ctx = Context(Settings(**settings), {}, 1001, "user1", "vm")
    check = check_kill_wait(ctx, conf)
    assert check.status == "ok", check


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a character device needs root")
def test_emulated_gpu_nodes_are_world_read_write_whatever_the_umask(layout: Layout) -> None:
    """As a real node's /dev/nvidiaN: 0666, not the 0644 or 0600 a umask would leave."""
    from acbslurm.sandbox import gpus

    old = os.umask(0o077)
    try:
        made = gpus.create(layout, Params(gpus=2, node="n1"))
    finally:
        os.umask(old)
    for g in made["n1"]:
        st = os.stat(g.device)
        assert stat.S_ISCHR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o666


def test_a_users_slurm_clients_are_the_sandboxs_even_on_the_package(tmp_path: Path) -> None:
    # On the package leg the users' acbslurm is /usr/bin/acbslurm, where Debian's 22.05
    # sbatch also lives; slurmctld 25.11 refuses that client ("Insane message length").
    import shutil

    from acbslurm.sandbox import Sandbox

    prefix = tmp_path / "25.11.7" / "prefix"
    for d in ("bin", "sbin"):
        (prefix / d).mkdir(parents=True)
    sbatch = prefix / "bin" / "sbatch"
    sbatch.write_text("#!/bin/sh\n")
    sbatch.chmod(0o755)
    sb = Sandbox(tmp_path / "sb")
    sb.layout.root.mkdir()
    sb.layout.save_params(
        Params(python="/usr/bin/python3", slurm_prefix=str(prefix), slurm_release="25.11.7")
    )
    path = sb.user_env("root")["PATH"]
    assert shutil.which("sbatch", path=path) == str(sbatch)
    assert shutil.which("python3", path=path) == "/usr/bin/python3"
