"""A model server's processes, by session: who they are, what shared memory they
hold, and killing them all.

A vLLM server runs in a session of its own (``start_new_session``: its API server,
its engine process and their helpers). Killed by SIGKILL, nothing of it unlinks the
POSIX shared memory it made (Python's ``multiprocessing.shared_memory``, names
``/dev/shm/psm_*``: vLLM's message queues between its processes), so whoever kills
it removes those files, and only those the session's processes had mapped or open
(other servers on the host have theirs).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from acbslurm.units import is_ascii_int

SHM = "/dev/shm"
SHM_PREFIX = "psm_"


def _stat_fields(pid: int) -> list[str]:
    """``/proc/PID/stat`` after the command's name: state, ppid, pgrp, session, ..."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()


def session_pids(sid: int) -> set[int]:
    """The live (not zombie) processes of session ``sid``."""
    out: set[int] = set()
    for name in os.listdir("/proc"):
        if not is_ascii_int(name):
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = _stat_fields(int(name))
            if int(fields[3]) == sid and fields[0] != "Z":
                out.add(int(name))
    return out


def shm_files(pids: set[int]) -> set[str]:
    """The ``/dev/shm/psm_*`` files ``pids`` have mapped or open (a stopped process's
    too: /proc reads it without its help)."""
    found: set[str] = set()
    prefix = os.path.join(SHM, SHM_PREFIX)
    for pid in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
                path = line.split(maxsplit=5)[5] if len(line.split(maxsplit=5)) == 6 else ""
                if path.startswith(prefix) and not path.endswith(" (deleted)"):
                    found.add(path)
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if target.startswith(prefix) and not target.endswith(" (deleted)"):
                        found.add(target)
    return found


def remove_shm(paths: set[str]) -> int:
    """Unlink ``paths`` (``/dev/shm/psm_*`` only); how many were there."""
    removed = 0
    prefix = os.path.join(SHM, SHM_PREFIX)
    for path in paths:
        if not path.startswith(prefix) or "/" in path[len(SHM) + 1 :]:
            continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
            removed += 1
    return removed


def kill_session(sid: int, wait: float = 10.0) -> set[str]:
    """SIGKILL every process of session ``sid`` (a stopped one dies too) and wait up to
    ``wait`` seconds until none is left alive; the shared memory files they held, for
    the caller to remove once they are gone."""
    shm = shm_files(session_pids(sid))
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(sid, signal.SIGKILL)
    deadline = time.monotonic() + wait
    while True:
        left = session_pids(sid)
        if not left or time.monotonic() > deadline:
            break
        for pid in left:  # one that left the group but not the session
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    return shm
