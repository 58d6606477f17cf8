"""Suspend without a freezer: the container's process tree, from /proc."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from acbslurm.container.freeze import descendants, resume, signal_tree


def fake_proc(tmp_path: Path, parents: dict[int, int]) -> str:
    for pid, ppid in parents.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(f"{pid} (a (b) c) S {ppid} 1 1 0\n")
    (tmp_path / "self").mkdir()
    return str(tmp_path)


def test_descendants_are_the_tree_below_the_first_process(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, {1: 0, 10: 1, 11: 10, 12: 10, 13: 11, 20: 1})
    assert descendants(10, proc) == [10, 11, 12, 13]
    assert descendants(99, proc) == [99]


def state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]


def test_signal_tree_stops_and_resume_continues_a_real_tree() -> None:
    child = (
        "import subprocess, sys, time; "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"
    )
    top = subprocess.Popen([sys.executable, "-c", child])
    try:
        deadline = time.monotonic() + 20
        while len(descendants(top.pid)) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        took, refused = signal_tree(top.pid, signal.SIGSTOP)
        assert (len(took), refused) == (2, 0)
        deadline = time.monotonic() + 10
        while any(state(p) != "T" for p in took):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        resume(took)
        deadline = time.monotonic() + 10
        while any(state(p) == "T" for p in took):
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        for pid in reversed(descendants(top.pid)):
            os.kill(pid, signal.SIGKILL)
        top.wait()
