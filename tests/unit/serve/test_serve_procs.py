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


# A vLLM server's shape: its leader (the API server) starts a process of its session (the
# engine process) that holds a shared memory segment and a semaphore of multiprocessing's
# spawn context (/dev/shm/sem.mp-*, kept on disk), and starts one of its own in a new
# session (below it, outside the session). Each says its pid. Both are taken from
# multiprocessing's resource tracker (a process of the same session): killed after the
# engine, a busy machine could let it see the engine's end first and unlink them itself,
# and which of the two removed them would be a race, not what kill_session found.
ENGINE = """
import multiprocessing, subprocess, sys, time
from multiprocessing import resource_tracker, shared_memory
m = shared_memory.SharedMemory(create=True, size=4096)
lock = multiprocessing.get_context("spawn").Lock()
resource_tracker.unregister("/" + m.name, "shared_memory")
resource_tracker.unregister(lock._semlock.name, "semaphore")
away = subprocess.Popen(
    [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True
)
print(m.name, away.pid, flush=True)
time.sleep(600)
"""
LEADER = f"""
import subprocess, sys, time
engine = subprocess.Popen([sys.executable, "-c", {ENGINE!r}])
print(engine.pid, flush=True)
time.sleep(600)
"""


def test_a_killed_leader_leaves_its_session_which_kill_session_ends() -> None:
    """The API server SIGKILLed alone: its engine process lives on (vLLM's does, for
    good), holding its shared memory; kill_session ends it, and the process below it
    that left the session, and finds its segment and its semaphore."""
    p = subprocess.Popen(
        [sys.executable, "-c", LEADER], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert p.stdout is not None
    engine = int(p.stdout.readline())
    away = 0
    try:
        name, away_s = p.stdout.readline().split()
        away = int(away_s)
        os.kill(p.pid, signal.SIGKILL)
        assert p.wait(10) == -signal.SIGKILL
        assert procs.session_pids(p.pid) >= {engine}  # left running
        assert away in procs.server_pids(p.pid) and away not in procs.session_pids(p.pid)
        shm = procs.kill_session(p.pid)
        assert f"/dev/shm/{name.lstrip('/')}" in shm
        sems = {f for f in shm if f.startswith("/dev/shm/sem.mp-")}
        assert len(sems) == 1, shm
        assert not procs.session_pids(p.pid)
        assert procs.start_time(away) == 0 and procs.start_time(engine) == 0
        assert procs.remove_shm(shm) == 2
        assert not [f for f in shm if os.path.exists(f)]
    finally:  # a failed run leaves nothing either
        procs.remove_shm(procs.kill_session(p.pid))
        if away and procs.start_time(away):
            os.kill(away, signal.SIGKILL)
        p.stdout.close()


def test_a_pid_another_process_took_over_is_never_killed_nor_walked() -> None:
    """The server's leader gone and its pid taken by another process of the same user
    (a session leader, with a child): told the leader's start time, kill_session kills
    neither its group nor the processes below it, and finds none of its shared memory."""
    p = subprocess.Popen(
        [sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    path = ""
    try:
        assert p.stdout is not None
        name, child = p.stdout.readline().split()
        path = f"/dev/shm/{name.lstrip('/')}"
        started = procs.start_time(p.pid)
        t0 = time.monotonic()
        # the server's leader started before this process (a start time it does not have)
        assert procs.kill_session(p.pid, wait=2, started=started - 1) == set()
        assert time.monotonic() - t0 < 1  # nothing of the server to wait for
        assert procs.start_time(p.pid) == started and procs.start_time(int(child))
        assert p.poll() is None and os.path.exists(path)
        # told the right start time, it is the server's: all of it dies
        assert procs.kill_session(p.pid, started=started) == {path}
        assert p.wait(10) == -signal.SIGKILL and not procs.start_time(int(child))
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        if path:
            procs.remove_shm({path})
        if p.stdout is not None:
            p.stdout.close()


def test_a_gone_leader_s_session_is_killed_without_its_group_or_pid() -> None:
    """The leader SIGKILLed and reaped (its pid free): its session's processes, found by
    their session and start time, die, and those below them; nothing is sent to the
    leader's group or pid (killpg would reach whoever takes the pid next)."""
    p = subprocess.Popen(
        [sys.executable, "-c", LEADER], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert p.stdout is not None
    started = procs.start_time(p.pid)
    engine = int(p.stdout.readline())
    away = 0
    try:
        name, away_s = p.stdout.readline().split()
        away = int(away_s)
        os.kill(p.pid, signal.SIGKILL)
        assert p.wait(10) == -signal.SIGKILL  # reaped: the pid is free
        shm = procs.kill_session(p.pid, started=started)
        assert f"/dev/shm/{name.lstrip('/')}" in shm
        assert procs.start_time(away) == 0 and procs.start_time(engine) == 0
        assert procs.remove_shm(shm) == 2
    finally:
        procs.remove_shm(procs.kill_session(p.pid, started=started))
        if away and procs.start_time(away):
            os.kill(away, signal.SIGKILL)
        p.stdout.close()
