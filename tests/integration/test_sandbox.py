"""The sandbox is a real cluster: Slurm allocates emulated GPUs, user1's rootless Docker
runs containers with the job's GPU UUID, slurmdbd records gres/gpu."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from acbslurm.sandbox import Sandbox
from acbslurm.sandbox.procs import marked_pids

JOB = """#!/bin/bash
#SBATCH --job-name=sandbox-gpu
#SBATCH --gres=gpu:1
#SBATCH --output={out}
set -eu
uuid=$(python3 -I -c 'import json,os,sys
gpus = json.load(open(sys.argv[1]))["gpus"]
idx = int(os.environ["SLURM_JOB_GPUS"].split(",")[0])
print([g["uuid"] for g in gpus if g["minor"] == idx][0])' {inventory})
echo "slurm_gpus=$SLURM_JOB_GPUS uuid=$uuid"
docker run --rm --label test=sandbox-gpu --gpus "\\"device=$uuid\\"" {image} \
  sh -c 'echo "container_uid=$(id -u) visible=$NVIDIA_VISIBLE_DEVICES"'
"""


def _wait_job(sb: Sandbox, job_id: str, timeout: float = 60) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = sb.run_slurm(
            ["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "JobID,State,ExitCode,AllocTRES"]
        ).stdout.strip()
        if out:
            _, state, code, tres = out.splitlines()[0].split("|")
            if state not in ("PENDING", "RUNNING", "COMPLETING", "REQUEUED"):
                return {"state": state, "exit": code, "tres": tres}
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} did not finish in {timeout} s")


def test_sinfo_shows_emulated_gpus(sandbox: Sandbox) -> None:
    out = sandbox.run_slurm(["sinfo", "-h", "-o", "%N %G %P"]).stdout.split()
    assert out[1] == "gpu:2"
    assert out[2] == "p1*"


def test_gpu_job_runs_container_with_its_uuid_as_user1(idle_sandbox: Sandbox) -> None:
    sb = idle_sandbox
    home = Path(f"/home/{sb.user}")
    out_file = home / f"sandbox-test-{time.time_ns()}.out"
    script = JOB.format(out=out_file, inventory=sb.layout.inventory, image="acbslurm/busybox")
    job_id = sb.run_as_user(
        ["sbatch", "--parsable", "--account=user1"], input=script
    ).stdout.strip()
    result = _wait_job(sb, job_id)
    text = out_file.read_text()
    assert result["state"] == "COMPLETED", text
    assert "gres/gpu=1" in result["tres"]
    # The job's GPU index became the inventory's UUID and Docker passed exactly it on.
    line = next(ln for ln in text.splitlines() if ln.startswith("slurm_gpus="))
    uuid = line.split("uuid=")[1]
    assert uuid in {g.uuid for g in sb.gpus}
    assert f"visible={uuid}" in text
    # Rootless: uid 0 inside the container is user1 outside; the daemon is user1's.
    assert "container_uid=0" in text
    records = [r for r in sb.hook_records() if r["devices"] == uuid]
    assert records, "the stand-in NVIDIA hook saw no container with the job's GPU"
    # sacct's job owner is user1, as submitted.
    owner = sb.run_slurm(["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "User"]).stdout
    assert owner.strip() == sb.user
    out_file.unlink()


def test_gpus_queue_when_all_are_taken(idle_sandbox: Sandbox) -> None:
    sb = idle_sandbox
    ids = [
        sb.run_as_user(
            [
                "sbatch",
                "--parsable",
                "--account=user1",
                "--gres=gpu:1",
                "-o",
                "/dev/null",
                "--wrap",
                "sleep 30",
            ]
        ).stdout.strip()
        for _ in range(3)
    ]
    try:
        deadline = time.monotonic() + 20
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            out = sb.run_slurm(["squeue", "-h", "-j", ",".join(ids), "-o", "%i %T %r %b"]).stdout
            states = {ln.split()[0]: ln for ln in out.splitlines()}
            running = [s for s in states.values() if " RUNNING " in s]
            pending = [s for s in states.values() if " PENDING " in s]
            # The waiting job's reason reads Priority (or None) until the scheduler has
            # looked at it with both GPUs taken; only then Resources.
            if len(running) == 2 and len(pending) == 1 and "Resources" in pending[0]:
                break
            time.sleep(0.3)
        running = [s for s in states.values() if " RUNNING " in s]
        pending = [s for s in states.values() if " PENDING " in s]
        assert len(running) == 2, states
        assert len(pending) == 1 and "Resources" in pending[0], states
    finally:
        sb.run_slurm(["scancel", *ids], check=False)


def test_env_exports_point_at_the_sandbox(sandbox: Sandbox) -> None:
    env = sandbox.env()
    assert Path(env["SLURM_CONF"]).read_text().count("AccountingStorageTRES=gres/gpu") == 1
    assert env["DOCKER_HOST"].startswith("unix://")
    # The DB option file must not be world readable: it holds a password.
    assert Path(env["ACBSLURM_DB_CONFIG"]).stat().st_mode & 0o077 == 0
    assert Path(sandbox.layout.slurmdbd_conf).stat().st_mode & 0o777 == 0o600


def _beside(sandbox: Sandbox, name: str, port_offset: int) -> tuple[Sandbox, int]:
    """A second sandbox next to the session's (its dir + -name, its ports + offset), so
    that two test runs on two sandboxes of one machine never share one. Short names:
    rootless containerd's socket paths under the directory must stay within 107 bytes."""
    root = Path(f"{sandbox.layout.root}-{name}")
    return Sandbox(root), sandbox.params.port_base + port_offset


@pytest.fixture
def second_sandbox(sandbox: Sandbox) -> Iterator[tuple[Sandbox, int]]:
    sb, port_base = _beside(sandbox, "lc", 4000)
    yield sb, port_base
    sb.down()


def test_lifecycle_up_is_idempotent_and_down_leaves_nothing(
    sandbox: Sandbox, second_sandbox: tuple[Sandbox, int]
) -> None:
    sb, port_base = second_sandbox
    sb.up(1, port_base=port_base, install=sandbox.params.slurm)
    pids = {s.name: s.pid for s in sb.status()}
    assert all(s.ready for s in sb.status()), sb.status()
    t0 = time.monotonic()
    msg = sb.up(None)
    assert "already up" in msg
    assert time.monotonic() - t0 < 5
    assert {s.name: s.pid for s in sb.status()} == pids  # nothing was restarted
    stopped = sb.down()
    assert set(stopped) == set(pids)
    assert marked_pids(sb.marker) == []
    for pid in pids.values():
        assert pid is not None
        assert not Path(f"/proc/{pid}").exists() or _not_same(pid)
    assert not any(s.running for s in sb.status())
    # up works again after down, on the kept state.
    sb.up(None)
    assert all(s.ready for s in sb.status())
    assert json.loads(sb.layout.params_file.read_text())["gpus"] == 1


def _not_same(pid: int) -> bool:
    # A recycled pid belongs to some other process, never to the sandbox. One that is
    # exiting as we look (seen once on Docker 26.1: /proc/PID still there, its environ
    # ESRCH) is gone too.
    try:
        return b"ACBSLURM_SANDBOX=" not in Path(f"/proc/{pid}/environ").read_bytes()
    except (ProcessLookupError, FileNotFoundError):
        return True


def test_failed_component_is_named_with_its_log_and_nothing_is_left(sandbox: Sandbox) -> None:
    import socket

    from acbslurm.errors import SetupError

    sb, port_base = _beside(sandbox, "fail", 6000)
    blocker = socket.socket()
    blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    blocker.bind(("0.0.0.0", port_base))  # slurmctld's port, taken
    blocker.listen()
    try:
        with pytest.raises(SetupError) as exc:
            sb.up(1, port_base=port_base, install=sandbox.params.slurm)
        msg = str(exc.value)
        assert "slurmctld" in msg
        assert "last" in msg and "slurmctld.log" in msg
    finally:
        blocker.close()
        sb.down()
    assert marked_pids(sb.marker) == []


def test_without_root_it_names_the_fix(sandbox: Sandbox) -> None:
    r = sandbox.run_as_user(
        [sandbox.params.python, "-m", "acbslurm", "sandbox", "up", "--dir", "/tmp/sb-nonroot"],
        extra_env={"PYTHONPATH": sandbox.params.pythonpath},
        check=False,
    )
    assert r.returncode == 3
    assert "needs root" in r.stderr and "Traceback" not in r.stderr
    assert not Path("/tmp/sb-nonroot").exists()  # nothing half-done
