"""Faults of the job record directory (``record_dir``): read-only, or full (ENOSPC).

The prolog cannot record the job's GPUs, which `acbslurm run` needs: it fails, so Slurm
drains the node ("Prolog error") and requeues the job held; it leaves no temporary file.
An epilog that cannot remove a record says so and exits 0 (no drain): the ended job's
id never returns. What the admin does is done too: fix the directory, resume the node,
release the job, which then runs.

The faults are real mounts over the sandbox's record directory (a read-only bind mount;
a small tmpfs filled up), always undone. The hooks' messages are read from the sandbox's
hooks log (no syslog daemon here; slurmd logs a hook's stderr only when it fails).
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sandboxtest import RERUN_WAIT, job_fields, submit, wait_job, wait_until

from acbslurm.config import load_settings

pytestmark = pytest.mark.integration


def mount(*argv: str) -> None:
    subprocess.run(["mount", *argv], check=True, capture_output=True, timeout=30)


def unmount(path: Path) -> None:
    # Lazily, if a hook still has a file open there: the fault must never outlive the test.
    r = subprocess.run(["umount", str(path)], capture_output=True, timeout=30)
    if r.returncode != 0:
        subprocess.run(["umount", "-l", str(path)], check=True, capture_output=True, timeout=30)


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[None]:
    mount("--bind", str(path), str(path))
    try:
        mount("-o", "remount,ro,bind", str(path))
        yield
    finally:
        unmount(path)


@contextlib.contextmanager
def full(path: Path) -> Iterator[None]:
    """A 64 KiB tmpfs over ``path``, filled up: creating a file works, writing fails."""
    mount("-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs", str(path))
    try:
        fd = os.open(path / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            while os.write(fd, b"x" * 4096):
                pass
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
        finally:
            os.close(fd)
        yield
    finally:
        unmount(path)


FAULTS: dict[str, tuple[Callable[[Path], contextlib.AbstractContextManager[None]], str]] = {
    "read-only": (read_only, "[Errno 30] Read-only file system"),
    "full": (full, "[Errno 28] No space left on device"),
}


class HooksLog:
    """What the hooks said after this point (the sandbox's log/hooks.log)."""

    def __init__(self, sb: Any) -> None:
        self.path = sb.layout.log_file("hooks")
        self.start = self.path.stat().st_size if self.path.exists() else 0

    def text(self) -> str:
        with open(self.path, "rb") as f:
            f.seek(self.start)
            return f.read().decode(errors="replace")


def record_dir(sb: Any) -> Path:
    return Path(load_settings(str(sb.layout.acbslurm_conf)).record_dir)


def node(sb: Any) -> dict[str, str]:
    out = sb.run_slurm(["scontrol", "show", "node", "-o"]).stdout
    # Reason=... is last and may hold blanks.
    head, _, reason = out.strip().partition(" Reason=")
    fields = dict(t.partition("=")[::2] for t in head.split() if "=" in t)
    fields["Reason"] = reason
    return fields


def drained(sb: Any) -> dict[str, str]:
    """The node's fields when it is drained (or draining), else {}."""
    fields = node(sb)
    return fields if "DRAIN" in fields["State"] else {}


@pytest.fixture
def undrained(idle: Any) -> Iterator[Any]:
    """As ``idle``; a node a failed case left drained is resumed (the next case needs it)."""
    yield idle
    if n := drained(idle):
        idle.run_slurm(["scontrol", "update", f"nodename={n['NodeName']}", "state=resume"])


def requeued_held(sb: Any, job: str) -> bool:
    f = job_fields(sb, job)
    held = (f.get("JobState"), f.get("Reason")) == ("PENDING", "launch_failed_requeued_held")
    return held and f.get("Restarts", "0") != "0"


def in_queue(sb: Any, job: str) -> bool:
    return bool(sb.run_slurm(["squeue", "-h", "-j", job], check=False).stdout.strip())


@pytest.mark.parametrize("fault", FAULTS)
def test_the_prolog_fails_on_the_record_dir_and_the_admin_resumes(
    undrained: Any, scripts: Path, fault: str
) -> None:
    sb = undrained
    rd = record_dir(sb)
    make_fault, strerror = FAULTS[fault]
    log = HooksLog(sb)
    with make_fault(rd):
        before = sorted(os.listdir(rd))
        job = submit(sb, scripts, "echo job ran", "--gres=gpu:1")
        # Slurm requeues the job held (once its epilog is done: Restarts counts it) and
        # drains the node with its own reason.
        wait_until(f"job {job} requeued held", lambda: requeued_held(sb, job))
        n = wait_until("the node drained", lambda: drained(sb))
        assert n["Reason"].startswith("Prolog error"), n
        said = log.text()
        assert f"acbslurm-prolog: error: job {job}: {strerror}: '{rd}/.{job}." in said, said
        assert sorted(os.listdir(rd)) == before, "a temporary file was left behind"
    # What the admin does: the directory is fixed (unmounted), resume the node, release
    # the job; it starts once eligible (the sandbox's cred_expire after the requeue).
    sb.run_slurm(["scontrol", "update", f"nodename={n['NodeName']}", "state=resume"])
    sb.run_slurm(["scontrol", "release", job])
    f = wait_job(sb, job, ("COMPLETED",), RERUN_WAIT)
    assert f["ExitCode"] == "0:0", f
    assert "job ran" in (scripts / f"out-{job}.txt").read_text()
    wait_until(f"job {job} to leave the queue", lambda: not in_queue(sb, job))
    assert not (rd / f"{job}.json").exists()
    # The epilog after the failed prolog found no record: nothing to say it stays.
    assert "its record stays" not in log.text(), log.text()
    wait_until("the node idle", lambda: node(sb)["State"] == "IDLE")


def test_a_read_only_record_dir_keeps_the_record_without_a_drain(
    undrained: Any, scripts: Path
) -> None:
    sb = undrained
    rd = record_dir(sb)
    job = submit(sb, scripts, "echo started; sleep 300", "--gres=gpu:1")
    wait_job(sb, job, ("RUNNING",), 60)
    # RUNNING comes while the prolog runs (PrologFlags=Alloc), and the prolog writes more
    # than the record (the cgroup helper's pid file): a file it holds open for writing on
    # the bind mount makes the read-only remount fail (EBUSY). The batch script starts
    # only once the prolog is done.
    out = scripts / f"out-{job}.txt"
    wait_until(f"job {job}'s script started", lambda: out.exists() and "started" in out.read_text())
    assert (rd / f"{job}.json").exists()
    log = HooksLog(sb)
    with read_only(rd):
        sb.run_slurm(["scancel", job])
        wait_until(f"job {job} to leave the queue", lambda: not in_queue(sb, job))
        said = log.text()
        assert (
            f"acbslurm-epilog: error: job {job}: its record stays in {rd} (Read-only file "
            "system); the next prolog on this node will fail the same way: fix the directory"
        ) in said, said
        # Exit 0: no drain, the job ended as cancelled (not for its epilog).
        assert "DRAIN" not in node(sb)["State"], node(sb)
        assert job_fields(sb, job)["JobState"] == "CANCELLED"
    # What the admin does: the directory writable again, remove the stale record.
    stale = rd / f"{job}.json"
    assert stale.exists()
    stale.unlink()
    nxt = submit(sb, scripts, "true", "--gres=gpu:1")
    wait_job(sb, nxt, ("COMPLETED",), 60)
    wait_until("the node idle", lambda: node(sb)["State"] == "IDLE")
