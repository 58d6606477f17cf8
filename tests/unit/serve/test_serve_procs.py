"""``serve.procs``: a server's session killed, stopped or not, and only its own
``/dev/shm/psm_*`` files found and removed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from multiprocessing import shared_memory

from acbslurm.serve import procs

# A process in a session of its own that makes a shared memory segment, says its name
# and waits (its child too, in the same session).
HOLDER = """
import subprocess, sys, time
from multiprocessing import shared_memory
m = shared_memory.SharedMemory(create=True, size=4096)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(m.name, child.pid, flush=True)
time.sleep(600)
"""


def test_kill_session_finds_only_its_shm_and_kills_a_stopped_session() -> None:
    other = shared_memory.SharedMemory(create=True, size=4096)  # another server's
    p = subprocess.Popen(
        [sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert p.stdout is not None
        name, child = p.stdout.readline().split()
        path = f"/dev/shm/{name.lstrip('/')}"
        # and Python's resource tracker, which SharedMemory starts
        assert {p.pid, int(child)} <= procs.session_pids(p.pid)
        assert procs.shm_files(procs.session_pids(p.pid)) == {path}
        os.killpg(p.pid, signal.SIGSTOP)  # hung: stopped processes die of SIGKILL too
        shm = procs.kill_session(p.pid)
        assert shm == {path}
        assert p.wait(10) == -signal.SIGKILL
        assert not procs.session_pids(p.pid)
        assert os.path.exists(path)  # SIGKILL left it: the caller removes it
        assert procs.remove_shm({*shm, "/dev/shm/not-psm", "/etc/passwd"}) == 1
        assert not os.path.exists(path)
        assert os.path.exists(f"/dev/shm/{other.name.lstrip('/')}")
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        if p.stdout is not None:
            p.stdout.close()
        other.close()
        other.unlink()


def test_kill_session_of_nobody_returns_at_once() -> None:
    t0 = time.monotonic()
    assert procs.kill_session(2**22 + 12345) == set()
    assert time.monotonic() - t0 < 1
