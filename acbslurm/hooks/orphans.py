"""A job's container processes, found without Docker: for when the job user's daemon is gone.

A container is a child of its containerd-shim, not of the Docker daemon: when the daemon
dies (SIGKILL, OOM), the job's containers keep running and keep their GPUs. Asking the
daemon then gets "connection refused", which says nothing about them. So the epilog,
as root, looks for them itself: `acbslurm run` starts every container with
``ACBSLURM_JOB_ID=<job>`` in its environment, which every process in it inherits, and
a rootless container's processes run as the job user's uid or one of their subuids.
Those processes are killed; the node is drained if any survives.

Exited containers stay in the daemon's state; the job is remembered here
(``<record_dir>/unswept/<uid>``) and the user's next prolog or epilog on this node,
when the daemon answers again, removes them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable

from acbslurm.procfs import read_bytes, real_uid
from acbslurm.units import is_ascii_int

ENV_NAME = "ACBSLURM_JOB_ID"


def subuid_ranges(user: str, path: str = "/etc/subuid") -> list[tuple[int, int]]:
    """``(first, count)`` of each subordinate uid range of ``user`` (rootless Docker)."""
    out: list[tuple[int, int]] = []
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return out
    for line in lines:
        name, _, rest = line.partition(":")
        first, _, count = rest.partition(":")
        if name == user and is_ascii_int(first) and is_ascii_int(count):
            out.append((int(first), int(count)))
    return out


class _UserUids:
    """The job user's uid and subuids: a rootless container's processes run as these."""

    def __init__(self, uid: int, user: str, subuid: str) -> None:
        self.uid = uid
        self.ranges = subuid_ranges(user, subuid) if user else []

    def owns(self, status: bytes) -> bool:
        u = real_uid(status)
        return u == self.uid or any(first <= u < first + n for first, n in self.ranges)


def _processes(proc: str) -> list[str]:
    return [e for e in os.listdir(proc) if is_ascii_int(e) and int(e) != os.getpid()]


def job_processes(
    job_id: str,
    uid: int,
    user: str,
    proc: str = "/proc",
    subuid: str = "/etc/subuid",
) -> list[int]:
    """Live processes of the user (or their subuids) whose environment names ``job_id``."""
    marker = f"{ENV_NAME}={job_id}".encode()
    owner = _UserUids(uid, user, subuid)
    found = []
    for entry in _processes(proc):
        status = read_bytes(f"{proc}/{entry}/status")
        if not owner.owns(status) or b"\nState:\tZ" in status:
            continue  # someone else's, or a zombie (it holds nothing any more)
        if marker in read_bytes(f"{proc}/{entry}/environ").split(b"\0"):
            found.append(int(entry))
    return sorted(found)


def kill_job_processes(
    job_id: str,
    uid: int,
    user: str,
    timeout: float = 3.0,
    proc: str = "/proc",
    subuid: str = "/etc/subuid",
) -> tuple[list[int], list[int]]:
    """SIGKILL the job's container processes; ``(killed, still alive after timeout)``."""
    return _kill_and_wait(lambda: job_processes(job_id, uid, user, proc, subuid), timeout)


def device_holders(
    devices: list[str],
    uid: int,
    user: str,
    proc: str = "/proc",
    subuid: str = "/etc/subuid",
) -> list[int]:
    """Processes of the user (or their subuids) with one of ``devices`` open.

    The last word on "does anything still use the job's GPUs": a container process that
    cleared its environment is not found by its variable, but CUDA keeps
    ``/dev/nvidiaN`` open. Compared by device number, so a container's own name for the
    file does not matter.
    """
    wanted = set()
    for dev in devices:
        with contextlib.suppress(OSError):
            wanted.add(os.stat(dev).st_rdev)
    if not wanted:
        return []
    owner = _UserUids(uid, user, subuid)
    found = []
    for entry in _processes(proc):
        if owner.owns(read_bytes(f"{proc}/{entry}/status")) and _holds(proc, entry, wanted):
            found.append(int(entry))
    return sorted(found)


_O_PATH = 0o10000000


def _holds(proc: str, pid: str, wanted: set[int]) -> bool:
    """Whether process ``pid`` has a device of ``wanted`` (device numbers) open, other
    than by an O_PATH descriptor: that names the file but cannot read or write it (nor
    ioctl), so it holds no GPU; anyone may take one of a file they can reach."""
    try:
        fds = os.listdir(f"{proc}/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            st = os.stat(f"{proc}/{pid}/fd/{fd}")
        except OSError:
            continue
        if st.st_rdev not in wanted or not st.st_rdev:
            continue
        info = read_bytes(f"{proc}/{pid}/fdinfo/{fd}").splitlines()
        flags = [line for line in info if line.startswith(b"flags:")]
        try:
            if not int(flags[0].split()[1], 8) & _O_PATH:
                return True
        except (IndexError, ValueError):
            return True  # no flags to read: not known to be O_PATH
    return False


def kill_device_holders(
    devices: list[str],
    uid: int,
    user: str,
    timeout: float = 3.0,
    proc: str = "/proc",
    subuid: str = "/etc/subuid",
) -> tuple[list[int], list[int]]:
    """SIGKILL the user's processes (or their subuids') holding one of ``devices`` open;
    ``(killed, still holding after timeout)``."""
    return _kill_and_wait(lambda: device_holders(devices, uid, user, proc, subuid), timeout)


def _kill_and_wait(find: Callable[[], list[int]], timeout: float) -> tuple[list[int], list[int]]:
    """SIGKILL what ``find`` lists, then list again until none of them is left or
    ``timeout`` passes; ``(killed, still listed)``."""
    pids = find()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    left = pids
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [p for p in find() if p in pids]
    return pids, left


# -- jobs whose exited containers wait for the daemon to answer again ------------------


def _unswept_file(record_dir: str, uid: int) -> str:
    return os.path.join(record_dir, "unswept", str(uid))


def unswept(record_dir: str, uid: int) -> list[str]:
    """Jobs of ``uid`` whose containers could not be removed (daemon unreachable)."""
    text = read_bytes(_unswept_file(record_dir, uid)).decode(errors="replace")
    return [j for j in text.split() if j]


def remember_unswept(record_dir: str, uid: int, job_id: str) -> None:
    jobs = unswept(record_dir, uid)
    if job_id not in jobs:
        _write_unswept(record_dir, uid, [*jobs, job_id])


def forget_unswept(record_dir: str, uid: int, job_ids: list[str]) -> None:
    left = [j for j in unswept(record_dir, uid) if j not in job_ids]
    if left:
        _write_unswept(record_dir, uid, left)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(_unswept_file(record_dir, uid))


def _write_unswept(record_dir: str, uid: int, jobs: list[str]) -> None:
    path = _unswept_file(record_dir, uid)
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    os.fchmod(fd, 0o644)  # not slurmd's umask: only root may change whose jobs are swept
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(jobs) + "\n")
    os.replace(tmp, path)
