"""The hooks' exit-code policy and files, on a temporary node (no Slurm, no Docker)."""

import json
import os
from pathlib import Path
from typing import Any

import pytest
from fake_slurm import FakeSlurm

from acbslurm.gpu.inventory import GpuInfo, write_static
from acbslurm.hooks.epilog import run_epilog
from acbslurm.hooks.prolog import run_prolog
from acbslurm.hooks.task_prolog import run_task_prolog


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_slurm: FakeSlurm) -> Path:
    dev = tmp_path / "dev"
    dev.mkdir()
    for i in range(3):
        try:
            os.mknod(dev / f"nvidia{i}", 0o600 | 0o020000, os.makedev(195, i))
        except PermissionError:
            pytest.skip("mknod needs root")
    (tmp_path / "gres.conf").write_text(f"NodeName=n1 Name=gpu File={dev}/nvidia[0-2]\n")
    write_static(
        tmp_path / "gpus.json",
        [GpuInfo(index=i, minor=2 - i, uuid=f"GPU-{i}{i}{i}{i}") for i in range(3)],
    )
    (tmp_path / "acbslurm.yaml").write_text(
        f"gres_conf: {tmp_path}/gres.conf\n"
        f"gpu_inventory: {tmp_path}/gpus.json\n"
        f"record_dir: {tmp_path}/jobs\n"
        f"docker_host: unix://{tmp_path}/run/{{user}}/docker.sock\n"
        # No cgroup helper: a unit test's job has no Slurm cgroups to join (the helper
        # is tested in tests/unit/cgroups and on the sandbox).
        "container_cgroups: off\n"
        f"job_runtime_dir: {tmp_path}/run/job\n"  # not the machine's /run/acbslurm
    )
    (tmp_path / "run" / "job").mkdir(parents=True)
    monkeypatch.setenv("ACBSLURM_CONFIG", str(tmp_path / "acbslurm.yaml"))
    # Job 77 runs on n1 with 2 CPUs and 1 GiB; the hooks find scontrol by slurm_bin_dir.
    fake_slurm.set_cluster(nodes={"n1": "gpu:3"})
    fake_slurm.add_job("77", "RUNNING", node="n1", cpu_ids="0-1", mem="1024", gpus=[0, 2])
    monkeypatch.setenv("ACBSLURM_SLURM_BIN_DIR", str(fake_slurm.bin_dir))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # slurmd gives hooks no PATH
    return tmp_path


def job_env(**extra: str) -> dict[str, str]:
    env = {"SLURM_JOB_ID": "77", "SLURM_JOB_UID": "1001", "SLURM_JOB_USER": "user1"}
    env["SLURMD_NODENAME"] = "n1"
    env.update(extra)
    return env


def indices(rec: dict[str, Any]) -> list[int]:
    """Slurm's indices of the GPUs of a record as written on disk."""
    return [g["index"] for g in rec["gpus"]]


def test_prolog_records_uuids_task_prolog_exports_epilog_removes(
    node: Path, capsys: pytest.CaptureFixture[str], fake_slurm: FakeSlurm
) -> None:
    assert run_prolog(job_env(SLURM_JOB_GPUS="0,2")) == 0
    rec = json.loads((node / "jobs" / "77.json").read_text())
    # index 0 -> nvidia0 -> minor 0 -> inventory entry with minor 0 (NVML index 2)
    assert rec["version"] == 2
    assert rec["gpus"] == [
        {"node": "n1", "index": 0, "minor": 0, "uuid": "GPU-2222"},
        {"node": "n1", "index": 2, "minor": 2, "uuid": "GPU-0000"},
    ]
    assert (rec["user"], rec["uid"], rec["node"]) == ("user1", 1001, "n1")
    assert (rec["cpus"], rec["mem_mb"], rec["alloc_error"]) == (2, 1024, "")
    # ... and wrote them into the job's AdminComment (status, report).
    comment = fake_slurm.jobs["77"]["admin_comment"]
    assert comment == "acbslurm:gpus=n1:0=GPU-2222,n1:2=GPU-0000"

    assert run_task_prolog(job_env()) == 0
    assert capsys.readouterr().out == "export ACBSLURM_GPU_UUIDS=GPU-2222,GPU-0000\n"

    # No daemon socket: nothing can be running there, so the epilog succeeds.
    assert run_epilog(job_env()) == 0
    assert not (node / "jobs" / "77.json").exists()


def test_prolog_without_an_allocation_records_a_refusal_not_no_limits(
    node: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """squeue and scontrol missing (no PATH, no slurm_bin_dir): the job runs, its record says why no
    container may start, and slurmd's log gets the same line."""
    from acbslurm.container.options import resolve_limits
    from acbslurm.errors import SetupError
    from acbslurm.jobrecord import read_record

    monkeypatch.setenv("ACBSLURM_SLURM_BIN_DIR", str(node / "nothing-here"))
    assert run_prolog(job_env(SLURM_JOB_GPUS="0")) == 0
    err = capsys.readouterr().err
    assert "cannot read its CPU/memory allocation" in err
    assert f"{node}/nothing-here/squeue" in err
    rec = read_record(str(node / "jobs"), "77")
    assert rec is not None and rec.cpus == 0 and "nothing-here/squeue" in rec.alloc_error
    with pytest.raises(SetupError, match="no container is started without limits"):
        resolve_limits(None, None, rec)


def test_prolog_fails_only_when_gpus_cannot_be_mapped(node: Path) -> None:
    assert run_prolog(job_env(SLURM_JOB_GPUS="5")) == 1
    assert not (node / "jobs" / "77.json").exists()
    assert run_prolog(job_env()) == 0  # a job without GPUs
    assert json.loads((node / "jobs" / "77.json").read_text())["gpus"] == []


def test_epilog_drains_when_a_daemon_fails(node: Path, fake_slurm: FakeSlurm) -> None:
    # A socket that accepts but answers garbage: a container may still be running.
    import socket
    import threading

    (node / "run" / "user1").mkdir(parents=True)
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(str(node / "run" / "user1" / "docker.sock"))
    srv.listen(4)

    def answer() -> None:
        for _ in range(2):
            conn, _ = srv.accept()
            conn.recv(4096)
            conn.sendall(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\n\r\nboom")
            conn.close()

    threading.Thread(target=answer, daemon=True).start()
    # The job's uid is the test's: its listening socket is the user's daemon.
    assert run_epilog(job_env(SLURM_JOB_UID=str(os.getuid()))) == 1
    srv.close()
    assert fake_slurm.drained == {"n1": "acbslurm: job 77: a container may still hold its GPUs"}


def test_task_prolog_without_record_says_so(node: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_task_prolog(job_env()) == 0
    assert capsys.readouterr().out.startswith("print acbslurm: no job record for job 77")


@pytest.mark.parametrize("uid", ["abc", "", "4242"])
def test_hooks_survive_a_job_user_without_name(
    node: Path, uid: str, capsys: pytest.CaptureFixture[str], fake_slurm: FakeSlurm
) -> None:
    """A uid the node cannot name (directory service down) or garbage: no traceback, no drain."""
    env = job_env(SLURM_JOB_UID=uid)
    del env["SLURM_JOB_USER"]
    assert run_prolog(env) == 0
    rec = json.loads((node / "jobs" / "77.json").read_text())
    assert (rec["uid"], rec["user"]) == (int(uid) if uid.isdigit() else -1, "")
    (node / "jobs" / "77.json").unlink()
    assert run_epilog(env) == 0  # no record: the user comes from the environment again
    assert "Traceback" not in capsys.readouterr().err
    assert fake_slurm.drained == {}


def test_epilog_with_a_bad_docker_host_setting_says_why(
    node: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ACBSLURM_DOCKER_HOST", "unix:///run/{nope}/docker.sock")
    assert run_epilog(job_env()) == 1  # it cannot sweep the user's daemon
    assert "bad docker_host setting 'unix:///run/{nope}/docker.sock'" in capsys.readouterr().err


@pytest.mark.parametrize(("hook", "code"), [("prolog", 1), ("epilog", 1), ("task_prolog", 0)])
def test_a_hook_that_hangs_gives_up_at_its_deadline(hook: str, code: int) -> None:
    import subprocess
    import sys
    import time

    prog = (
        "import time, acbslurm.hooks.common as c\n"
        f"import acbslurm.hooks.{hook} as e\n"
        "c.HOOK_DEADLINE_S = 1\n"
        f"e.run_{hook} = lambda env: time.sleep(30) or 0\n"
        f"raise SystemExit(e.{hook}_main())\n"
    )
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=20)
    assert r.returncode == code
    assert "did not finish within 1 s" in r.stderr
    assert time.monotonic() - t0 < 10


def test_prolog_makes_the_jobs_private_runtime_dir_and_epilog_removes_it(
    node: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    base = node / "run-job"
    monkeypatch.setenv("ACBSLURM_JOB_RUNTIME_DIR", str(base))
    env = job_env(SLURM_JOB_ID="91")
    assert run_prolog(env) == 0
    st = (base / "91").stat()
    assert (st.st_uid, oct(st.st_mode & 0o7777)) == (1001, "0o700")
    assert oct(base.stat().st_mode & 0o777) == "0o755" and base.stat().st_uid == 0
    # What a broker killed with SIGKILL leaves, and a link the user planted.
    for name in ("broker.sock", "broker.sock.lane"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.bind(str(base / "91" / name))
        s.close()
    precious = node / "precious"
    precious.write_text("x")
    os.symlink(precious, base / "91" / "link")
    assert run_epilog(env) == 0
    assert not (base / "91").exists() and precious.read_text() == "x"


def test_a_runtime_dir_planted_before_the_prolog_is_replaced(
    node: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = node / "run-job"
    base.mkdir(mode=0o755)
    (base / "92").symlink_to(node)  # a link where the job's directory goes
    monkeypatch.setenv("ACBSLURM_JOB_RUNTIME_DIR", str(base))
    assert run_prolog(job_env(SLURM_JOB_ID="92")) == 0
    assert not (base / "92").is_symlink() and (base / "92").stat().st_uid == 1001
    assert node.exists()


def test_epilog_without_daemon_kills_the_jobs_container_processes(
    node: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A dockerd killed while the job ran: its container goes on under containerd-shim.
    # Before, "connection refused" counted as "nothing runs": exit 0, GPU double-booked.
    import subprocess
    import sys

    from acbslurm.hooks.orphans import unswept

    job = f"8{os.getpid()}"
    container = subprocess.Popen(
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
        env={"ACBSLURM_JOB_ID": job},
        stdout=subprocess.PIPE,
    )
    try:
        assert container.stdout is not None and container.stdout.readline() == b"up\n"
        env = job_env(SLURM_JOB_ID=job, SLURM_JOB_UID=str(os.getuid()))
        assert run_epilog(env) == 0
        assert container.wait(5) == -9
        err = capsys.readouterr().err
        assert "no Docker daemon answers at unix://" in err
        assert f"killed its container processes {container.pid} without Docker" in err
        # Its exited container is removed once the daemon answers again.
        assert unswept(str(node / "jobs"), os.getuid()) == [job]
    finally:
        container.kill()
        container.wait()
        if container.stdout is not None:
            container.stdout.close()


def test_epilog_without_daemon_drains_naming_the_job_while_its_gpu_is_held(
    node: Path,
    fake_slurm: FakeSlurm,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No daemon answers and a process of the user still holds the job's GPU (it cleared
    its environment, so no ACBSLURM_JOB_ID finds it): the GPU is not free, the node is
    drained with a reason naming the job, the epilog fails."""
    import pwd
    import subprocess
    import sys

    job = f"8{os.getpid()}"
    user = pwd.getpwuid(os.getuid()).pw_name
    monkeypatch.setenv("ACBSLURM_JOB_RUNTIME_DIR", str(node / "run-job"))
    env = job_env(SLURM_JOB_ID=job, SLURM_JOB_UID=str(os.getuid()), SLURM_JOB_USER=user)
    assert run_prolog({**env, "SLURM_JOB_GPUS": "0"}) == 0
    # An emulated GPU cannot be opened (no driver: ENXIO) and an O_PATH descriptor holds
    # nothing (device_holders skips it), so the job's GPU file here is a real device
    # with a driver, /dev/full's number, opened for real: found by its device number.
    dev = held_device(node, monkeypatch)
    hold = f"import os, time; fd = os.open({str(dev)!r}, os.O_RDONLY); print('up', flush=True)"
    holder = subprocess.Popen(
        [sys.executable, "-c", hold + "; time.sleep(60)"], env={}, stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"up\n"
        assert run_epilog(env) == 1
        assert fake_slurm.drained == {
            "n1": f"acbslurm: job {job}: a container may still hold its GPUs"
        }
        err = capsys.readouterr().err
        assert "no Docker daemon answers at unix://" in err
        assert f"job {job}: processes [{holder.pid}] of {user} still hold the job's GPUs" in err
        assert holder.poll() is None  # not the job's (no job id): reported, not killed
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()


def held_device(node: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A device file a process can hold open (/dev/full's number: nobody else holds it),
    standing in for the job's GPU files in the epilog."""
    from acbslurm.hooks import epilog

    dev = node / "dev" / "held"
    os.mknod(dev, 0o666 | 0o020000, os.makedev(1, 7))
    monkeypatch.setattr(epilog, "gpu_files", lambda *_: [str(dev)])
    return dev


def test_an_o_path_descriptor_holds_no_gpu(node: Path) -> None:
    """Anyone may take an O_PATH descriptor of a file they can reach: it reads, writes and
    ioctls nothing, so it must neither drain a node nor get a process killed."""
    import subprocess
    import sys

    from acbslurm.hooks.orphans import device_holders

    dev = node / "dev" / "nvidia0"
    hold = f"import os, time; fd = os.open({str(dev)!r}, os.O_PATH); print('up', flush=True)"
    holder = subprocess.Popen([sys.executable, "-c", hold + "; time.sleep(60)"], stdout=-1)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"up\n"
        assert device_holders([str(dev)], os.getuid(), "") == []
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()


def test_with_the_fence_the_epilog_kills_a_process_still_holding_the_jobs_gpu(
    node: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The fence takes the permission away; an open descriptor outlives it, so its
    process (the user's, no job id in its environment) is killed, and the epilog
    succeeds: nothing holds the GPU any more."""
    import subprocess
    import sys

    monkeypatch.setenv("ACBSLURM_GPU_FENCE", "true")
    monkeypatch.setenv("ACBSLURM_JOB_RUNTIME_DIR", str(node / "run-job"))
    job = f"6{os.getpid()}"
    env = job_env(SLURM_JOB_ID=job, SLURM_JOB_UID=str(os.getuid()), SLURM_JOB_USER="root")
    assert run_prolog({**env, "SLURM_JOB_GPUS": "0"}) == 0
    from acbslurm.gpu.fence import read_acl

    assert read_acl(str(node / "dev" / "nvidia0")).user_perm(os.getuid()) == 6
    assert read_acl(str(node / "dev" / "nvidia1")).users == ()
    dev = held_device(node, monkeypatch)
    hold = f"import os, time; fd = os.open({str(dev)!r}, os.O_RDONLY); print('up', flush=True)"
    holder = subprocess.Popen([sys.executable, "-c", hold + "; time.sleep(60)"], stdout=-1)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"up\n"
        assert run_epilog(env) == 0
        assert holder.wait(5) == -9
        assert f"killed processes {holder.pid} still holding its GPUs" in capsys.readouterr().err
        assert read_acl(str(node / "dev" / "nvidia0")).users == ()
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()


def test_a_failed_prolog_leaves_no_gpu_open(node: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from acbslurm.gpu.fence import read_acl
    from acbslurm.hooks import prolog

    monkeypatch.setenv("ACBSLURM_GPU_FENCE", "true")

    def broken(*_: object) -> None:
        raise OSError(28, "No space left on device")

    assert run_prolog(job_env(SLURM_JOB_ID="78", SLURM_JOB_GPUS="0")) == 0
    assert read_acl(str(node / "dev" / "nvidia0")).users == ((1001, 6),)
    # Job 78's epilog was killed: its record stays. Job 79's prolog fails on its runtime
    # directory; on its way out it reconciles the node: 78 has no slurmstepd and
    # slurmctld does not list it, so nobody keeps nvidia0.
    monkeypatch.setattr(prolog, "_make_job_dir", broken)
    assert run_prolog(job_env(SLURM_JOB_ID="79", SLURM_JOB_GPUS="0")) == 1
    assert read_acl(str(node / "dev" / "nvidia0")).users == ()


def test_no_daemon_and_no_container_processes_is_nothing_to_sweep(
    node: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A user without Docker (no socket file): each job's epilog used to warn and append
    the job to unswept/<uid>, which nothing ever emptied."""
    from acbslurm.hooks.orphans import unswept

    monkeypatch.setenv("ACBSLURM_JOB_RUNTIME_DIR", str(node / "run-job"))
    for job in ("71", "72", "73", "74", "75"):
        env = job_env(SLURM_JOB_ID=job, SLURM_JOB_UID=str(os.getuid()))
        assert run_prolog(env) == 0
        assert run_epilog(env) == 0
    assert "Docker" not in capsys.readouterr().err
    assert unswept(str(node / "jobs"), os.getuid()) == []


def test_a_daemon_stopped_during_the_job_leaves_its_job_to_sweep(
    node: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A daemon stopped gracefully removes its socket but keeps the job's stopped
    container: the socket was there when the job started, so the job is remembered."""
    from acbslurm.hooks.orphans import unswept

    monkeypatch.setenv("ACBSLURM_JOB_RUNTIME_DIR", str(node / "run-job"))
    env = job_env(SLURM_JOB_ID="76", SLURM_JOB_UID=str(os.getuid()), SLURM_JOB_USER="user1")
    sock = node / "run" / "user1" / "docker.sock"
    sock.parent.mkdir(parents=True)
    sock.write_text("")  # a stale socket file: nothing listens
    assert run_prolog(env) == 0
    sock.unlink()
    assert run_epilog(env) == 0
    assert "no Docker daemon answers" in capsys.readouterr().err
    assert unswept(str(node / "jobs"), os.getuid()) == ["76"]


def test_hook_messages_go_to_syslog_too(
    node: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import syslog

    from acbslurm.hooks import common

    opened: list[tuple[str, int, int]] = []
    logged: list[tuple[int, str]] = []
    monkeypatch.setattr(syslog, "openlog", lambda *a: opened.append(a))
    monkeypatch.setattr(syslog, "syslog", lambda prio, msg: logged.append((prio, msg)))
    monkeypatch.setattr(common, "_NAME", "acbslurm-prolog")
    monkeypatch.setattr(common, "_SYSLOG_OPEN", "")
    # Index 5 does not exist: the prolog fails, and says why on stderr and in syslog.
    assert run_prolog(job_env(SLURM_JOB_GPUS="5")) == 1
    err = capsys.readouterr().err
    assert "acbslurm-prolog: error: job 77:" in err
    assert opened == [("acbslurm-prolog", syslog.LOG_PID, syslog.LOG_DAEMON)]
    assert logged and logged[0][0] == syslog.LOG_ERR
    assert logged[0][1].startswith("error: job 77: SLURM_JOB_GPUS names GPU index 5")
    assert run_task_prolog(job_env(SLURM_JOB_ID="78")) == 0
    assert logged[-1] == (syslog.LOG_WARNING, "warning: no job record for job 78: is the "
                          "acbslurm prolog set up?")  # fmt: skip


def test_an_array_task_keeps_its_gpus_in_its_own_admin_comment(
    node: Path, fake_slurm: FakeSlurm
) -> None:
    """The array's last task keeps the array's id as its SLURM_JOB_ID: the prolog names
    it 40_2, since `scontrol update job=40` would write every task's AdminComment (and
    fail once one of them ended)."""
    fake_slurm.add_job("40_0", "COMPLETED", job_id="41", node="n1", cpu_ids="0-3", gpus=[1])
    fake_slurm.add_job("40_1", "RUNNING", job_id="42", node="n1", cpu_ids="1", gpus=[0])
    fake_slurm.add_job("40_2", "RUNNING", job_id="40", node="n1", cpu_ids="2", gpus=[2])
    # Slurm 22.05 gives the prolog no SLURM_ARRAY_*: the ids come from scontrol's line.
    assert run_prolog(job_env(SLURM_JOB_ID="40", SLURM_JOB_GPUS="2")) == 0
    jobs = fake_slurm.jobs
    assert jobs["40_2"]["admin_comment"] == "acbslurm:gpus=n1:2=GPU-0000"
    assert jobs["40_1"]["admin_comment"] == jobs["40_0"]["admin_comment"] == ""
    rec = json.loads((node / "jobs" / "40.json").read_text())  # `acbslurm run`'s id
    assert (rec["job_id"], rec["cpus"]) == ("40", 1)
    # Where Slurm sets them, the prolog's SLURM_ARRAY_* name the task.
    fake_slurm.update("40_2", admin_comment="")
    env = job_env(SLURM_JOB_ID="40", SLURM_JOB_GPUS="2")
    env.update(SLURM_ARRAY_JOB_ID="40", SLURM_ARRAY_TASK_ID="2")
    assert run_prolog(env) == 0
    assert fake_slurm.jobs["40_2"]["admin_comment"] == "acbslurm:gpus=n1:2=GPU-0000"


TIMED_OUT = "slurm_load_jobs error: Socket timed out on send/recv operation\n"


def test_a_slow_controller_is_asked_again_within_a_bound(
    node: Path,
    fake_slurm: FakeSlurm,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """slurmctld under a burst: the prolog's first `scontrol show job` fails, the second
    answers; the job is recorded with its allocation, its AdminComment written."""
    from acbslurm.slurm import allocation

    monkeypatch.setattr(allocation, "_RETRY_PAUSE", 0.0)
    fake_slurm.respond("scontrol", stderr=TIMED_OUT, rc=1, times=1)
    assert run_prolog(job_env(SLURM_JOB_GPUS="0,2")) == 0
    err = capsys.readouterr().err
    assert "job 77: asking slurmctld again: " in err and "Socket timed out" in err
    rec = json.loads((node / "jobs" / "77.json").read_text())
    assert (rec["cpus"], rec["mem_mb"], rec["alloc_error"]) == (2, 1024, "")
    devices = ",".join(f"n1:{g['index']}={g['uuid']}" for g in rec["gpus"])
    assert fake_slurm.jobs["77"]["admin_comment"] == f"acbslurm:gpus={devices}"
    shows = [a for a in fake_slurm.argvs("scontrol") if a[1:3] == ["show", "job"]]
    assert len(shows) == 2, shows


SHOW_40_2 = ["show", "job", "-d", "-o", "40_2"]


def test_an_array_task_whose_controller_never_answers_writes_no_admin_comment(
    node: Path,
    fake_slurm: FakeSlurm,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The array's last task has the array's id (40); slurmctld never answers its
    prolog. `scontrol update job=40` would write this task's GPUs into every task's
    AdminComment, so nothing is written: the record on the node has the GPUs (from
    SLURM_JOB_GPUS), the prolog says in one line why the report will show none, and
    `acbslurm run` will refuse, as without an allocation before."""
    from acbslurm.slurm import allocation

    monkeypatch.setattr(allocation, "_RETRY_PAUSE", 0.0)
    fake_slurm.add_job("40_1", "RUNNING", job_id="42", node="n1", cpu_ids="1", gpus=[0],
                       admin_comment="acbslurm:gpus=n1:0=GPU-x")  # fmt: skip
    fake_slurm.add_job("40_2", "RUNNING", job_id="40", node="n1", cpu_ids="2", gpus=[2])
    fake_slurm.respond("scontrol", stderr=TIMED_OUT, rc=1)
    assert run_prolog(job_env(SLURM_JOB_ID="40", SLURM_JOB_GPUS="2")) == 0
    err = capsys.readouterr().err
    rec = json.loads((node / "jobs" / "40.json").read_text())
    assert indices(rec) == [2] and "Socket timed out" in rec["alloc_error"]
    assert [a for a in fake_slurm.argvs("scontrol") if a[1] == "update"] == []
    jobs = fake_slurm.jobs
    assert jobs["40_1"]["admin_comment"] == "acbslurm:gpus=n1:0=GPU-x"
    assert jobs["40_2"]["admin_comment"] == ""
    said = [ln for ln in err.splitlines() if "not in its AdminComment" in ln]
    assert len(said) == 1, err
    assert f"job 40: GPUs {rec['gpus'][0]['uuid']} kept in its record on n1 only" in said[0]
    # Two attempts, each asking for the task by its own name (the array's id, asked at
    # the same time as squeue, is not read for an array task).
    assert len([a for a in fake_slurm.argvs("scontrol") if a[1:] == SHOW_40_2]) == 2


def test_a_cpu_only_job_without_an_answer_says_nothing_of_gpus(
    node: Path,
    fake_slurm: FakeSlurm,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from acbslurm.slurm import allocation

    monkeypatch.setattr(allocation, "_RETRY_PAUSE", 0.0)
    fake_slurm.respond("scontrol", stderr=TIMED_OUT, rc=1)
    assert run_prolog(job_env()) == 0
    assert "AdminComment" not in capsys.readouterr().err


def test_prolog_records_every_type_of_a_mixed_typed_job(node: Path, fake_slurm: FakeSlurm) -> None:
    """`--gres=gpu:h200:1,gpu:a100:1` on 22.05: the prolog's SLURM_JOB_GPUS holds the
    last type's index only; scontrol's GRES= detail has both, and only ever adds GPUs
    slurmctld gave the job."""
    fake_slurm.update("77", gpus=[0, 2])
    assert run_prolog(job_env(SLURM_JOB_GPUS="2")) == 0
    rec = json.loads((node / "jobs" / "77.json").read_text())
    assert indices(rec) == [0, 2]
    # A SLURM_JOB_GPUS index slurmctld does not list is not replaced: mapped (or
    # refused) as before.
    assert run_prolog(job_env(SLURM_JOB_GPUS="1")) == 0
    assert indices(json.loads((node / "jobs" / "77.json").read_text())) == [1]


def test_task_prolog_exports_the_tasks_gpus_only(
    node: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_prolog(job_env(SLURM_JOB_GPUS="0,2")) == 0
    capsys.readouterr()
    assert run_task_prolog(job_env(SLURM_STEP_ID="1", SLURM_STEP_GPUS="2")) == 0
    assert capsys.readouterr().out == "export ACBSLURM_GPU_UUIDS=GPU-0000\n"
    assert run_task_prolog(job_env(SLURM_STEP_ID="1")) == 0  # srun --gres=none
    assert capsys.readouterr().out == "export ACBSLURM_GPU_UUIDS=\n"
    assert run_task_prolog(job_env(SLURM_STEP_ID="1", SLURM_STEP_GPUS="1")) == 0
    out = capsys.readouterr().out
    assert "print acbslurm: SLURM_STEP_GPUS=1 names GPU 1" in out
    assert out.endswith("export ACBSLURM_GPU_UUIDS=\n")
