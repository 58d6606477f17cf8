"""A model server's processes, by session: who they are, what shared memory they
hold, and killing them all.

A vLLM server runs in a session of its own (``start_new_session``: its API server,
its engine process and their helpers). Its engine process (``VLLM::EngineCore``), the
engine's worker and multiprocessing's resource tracker do not notice their API
server's death: a SIGKILLed API server leaves them running for good, holding their
shared memory, until someone kills them. So whoever ends a server kills its whole
session, and the processes below it as well (a child that made a session of its own
is still a descendant). Killed by SIGKILL, nothing of it unlinks the POSIX shared
memory it made (Python's ``multiprocessing.shared_memory``, ``/dev/shm/psm_*``:
vLLM's message queues between its processes; and multiprocessing's named semaphores,
``/dev/shm/sem.mp-*``), so whoever kills it removes those files, and only those the
server's processes had mapped or open (other servers on the host have theirs).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from acbslurm.units import is_ascii_int

SHM = "/dev/shm"
# multiprocessing.shared_memory's segments, and its named semaphores (a spawned
# process's locks: kept on disk until the resource tracker, killed too, unlinks them)
SHM_PREFIXES = ("psm_", "sem.mp-")


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


def descendants(pids: set[int]) -> set[int]:
    """The live processes below ``pids`` (their children's children too), from each
    thread's ``children`` list in /proc."""
    out: set[int] = set()
    todo = list(pids)
    while todo:
        pid = todo.pop()
        with contextlib.suppress(OSError):
            for tid in os.listdir(f"/proc/{pid}/task"):
                with contextlib.suppress(OSError):
                    for kid in Path(f"/proc/{pid}/task/{tid}/children").read_text().split():
                        if int(kid) not in out:
                            out.add(int(kid))
                            todo.append(int(kid))
    return out


def server_pids(sid: int) -> set[int]:
    """A server's live processes: its session's, and every process below them or below
    its leader (one that made a session of its own is still there). Not its zombies:
    they hold nothing (no memory, no file, no mapping), and a killed server's orphans
    wait for this machine's init to reap them (docs/benchmarks.md, "Serve on vLLM")."""
    members = session_pids(sid)
    return members | {p for p, _ in _started(descendants(members | {sid}))}


def _is_shm(path: str) -> bool:
    name = path[len(SHM) + 1 :] if path.startswith(SHM + "/") else ""
    return name.startswith(SHM_PREFIXES) and "/" not in name and not path.endswith(" (deleted)")


def shm_files(pids: set[int]) -> set[str]:
    """The ``/dev/shm/psm_*`` and ``sem.mp-*`` files ``pids`` have mapped or open (a
    stopped process's too: /proc reads it without its help). Matched by device and
    inode (an inode number alone may be another file system's, a container's /dev/shm):
    the process that made a semaphore maps it under glibc's temporary name, since
    deleted, and the file lives on under the name it was linked to."""
    files: set[tuple[int, int]] = set()
    for pid in pids:
        files |= _shm_files_of(pid)
    if not files:
        return set()
    found: set[str] = set()
    with contextlib.suppress(OSError), os.scandir(SHM) as entries:
        for e in entries:
            path = os.path.join(SHM, e.name)
            with contextlib.suppress(OSError):
                if not _is_shm(path) or not e.is_file(follow_symlinks=False):
                    continue
                st = e.stat(follow_symlinks=False)
                if (st.st_dev, st.st_ino) in files:
                    found.add(path)
    return found


def _shm_files_of(pid: int) -> set[tuple[int, int]]:
    """``(device, inode)`` of the /dev/shm files process ``pid`` maps or holds open."""
    files: set[tuple[int, int]] = set()
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].startswith(SHM + "/") and is_ascii_int(parts[4]):
                with contextlib.suppress(ValueError):  # maps writes the device MAJOR:MINOR, hex
                    major, minor = parts[3].split(":")
                    files.add((os.makedev(int(major, 16), int(minor, 16)), int(parts[4])))
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(SHM + "/"):
                    st = os.stat(f"/proc/{pid}/fd/{fd}")
                    files.add((st.st_dev, st.st_ino))
    return files


def remove_shm(paths: set[str]) -> int:
    """Unlink ``paths`` (``/dev/shm/psm_*`` and ``sem.mp-*`` only); how many were there."""
    removed = 0
    for path in paths:
        if not _is_shm(path):
            continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
            removed += 1
    return removed


def kill_session(sid: int, wait: float = 10.0, started: int | None = None) -> set[str]:
    """SIGKILL every process of server ``sid`` (its session, and the processes below
    it: ``server_pids``; a stopped one dies too) and wait up to ``wait`` seconds until
    none is left alive; the shared memory files they held, for the caller to remove
    once they are gone.

    ``started`` is the leader's start time (``start_time``) as its caller saw it; None
    when the caller's own child (reaped or not) is the leader. Only while process
    ``sid`` is that leader (a zombie too: the pid is still taken) are its group and the
    processes below it the server's. Once it is gone its pid may be another process's,
    of this user: then no ``killpg(sid)`` and no walk below ``sid``; what is killed is
    what was the server's when first looked at (by pid and start time), and the live
    processes below those."""
    if started is None:
        started = _start_of(sid)
    held = _holds(sid, started)
    found = server_pids(sid) if held else _orphans(sid, started)
    shm = shm_files(found)
    left = _started(found)
    if held:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(sid, signal.SIGKILL)
    deadline = time.monotonic() + wait
    while left:
        for pid, _ in left:  # one that left the group, or the session
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
        left = _still_left(sid, started, left)
    return shm


def _still_left(sid: int, started: int, left: set[tuple[int, int]]) -> set[tuple[int, int]]:
    """The server's processes read again: a process forked meanwhile. One seen before is
    kept (its parent may be gone, taking it out of the tree) while it is the same
    process: a pid reused by another is never killed. The leader gone meanwhile: below
    what was the server's, never below ``sid``."""
    kept = {(p, t) for p, t in _started({p for p, _ in left}) if (p, t) in left}
    now = server_pids(sid) if _holds(sid, started) else descendants({p for p, _ in kept})
    return _started(now) | kept


def _holds(sid: int, started: int) -> bool:
    """Process ``sid`` (a zombie too) is the leader that started at ``started``."""
    return started != 0 and _start_of(sid) == started


def _orphans(sid: int, started: int) -> set[int]:
    """A gone leader's processes: session ``sid``'s and those below them, when no other
    process has taken the pid (a pid free of every process cannot be reused while a
    process of its session lives, so those are the leader's); none when one has."""
    if _start_of(sid):
        return set()
    members = {p for p, t in _started(session_pids(sid)) if t >= started}
    return members | {p for p, _ in _started(descendants(members))}


def _start_of(pid: int) -> int:
    """Process ``pid``'s start time, a zombie's too; 0 when there is none."""
    try:
        return int(_stat_fields(pid)[19])
    except (OSError, IndexError, ValueError):
        return 0


def start_time(pid: int) -> int:
    """When process ``pid`` started (clock ticks after boot); 0 when there is none."""
    return next((t for p, t in _started({pid})), 0)


def _started(pids: set[int]) -> set[tuple[int, int]]:
    """``(pid, start time)`` of each live process of ``pids``."""
    out: set[tuple[int, int]] = set()
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = _stat_fields(pid)
            if fields[0] not in ("Z", "X"):
                out.add((pid, int(fields[19])))
    return out
