"""Reading /proc the way the hooks and `acbslurm run` need it: a process may end at any
moment between listing and reading, so every read answers "nothing" rather than raise.

Shared by ``hooks/orphans.py`` (the epilog's sweep of a job's leftover processes),
``container/run_command.py`` (is this process really in job N?), ``container/launch.py``
(is the Docker daemon still stopping?), the sandbox's process table and the pool's
gateway (has a model's vLLM server ended?).
"""

from __future__ import annotations

import os


def read_bytes(path: str) -> bytes:
    """The file's bytes; empty when it cannot be read (gone meanwhile, a kernel thread)."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def real_uid(status: bytes) -> int:
    """The real uid of a ``/proc/PID/status`` text; -1 when it has none (gone)."""
    for line in status.splitlines():
        if line.startswith(b"Uid:"):
            return int(line.split()[1])
    return -1


def parent_pid(stat: bytes) -> int:
    """The parent pid of a ``/proc/PID/stat`` text; 0 when it has none (gone).

    The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    """
    fields = stat.rpartition(b")")[2].split()
    return int(fields[1]) if len(fields) > 1 else 0


def running(pid: int) -> bool:
    """Alive and not a zombie (an orphan nobody reaps stays listed in /proc)."""
    fields = read_bytes(f"/proc/{pid}/stat").rpartition(b")")[2].split()
    return bool(fields) and fields[0] not in (b"Z", b"X")


def stepd_job_of_ancestors(pid: int | None = None) -> str | None:
    """The job id of the nearest root-owned ``slurmstepd: [N.x]`` above ``pid``, or None.

    A job's processes descend from one; a user can set any environment and rename their
    own processes, but cannot create a root-owned ancestor.
    """
    pid = os.getpid() if pid is None else pid
    seen = 0
    while pid > 1 and seen < 64:
        seen += 1
        ppid = parent_pid(read_bytes(f"/proc/{pid}/stat"))
        uid = real_uid(read_bytes(f"/proc/{pid}/status"))
        job = stepd_job(read_bytes(f"/proc/{pid}/cmdline"))
        if uid == 0 and job is not None:
            return job
        pid = ppid
    return None


def stepd_job(cmdline: bytes) -> str | None:
    """The job id in slurmstepd's process title (a ``/proc/PID/cmdline``):
    ``slurmstepd: [1234.batch]``, ``[1234.extern]``, ``[1234.0]``; None for any other.

    Anyone can give a process this title: callers check that its real uid is 0.
    """
    prefix = b"slurmstepd: ["
    if not cmdline.startswith(prefix):
        return None
    rest = cmdline[len(prefix) :]
    digits = len(rest) - len(rest.lstrip(b"0123456789"))
    return rest[:digits].decode() if digits and rest[digits : digits + 1] in (b".", b"]") else None


def start_time(pid: int) -> str:
    """Field 22 of /proc/PID/stat (clock ticks after boot): with the pid, it names one
    process for its whole life; "" when it is gone."""
    fields = read_bytes(f"/proc/{pid}/stat").rpartition(b")")[2].split()
    return fields[19].decode() if len(fields) > 19 else ""
