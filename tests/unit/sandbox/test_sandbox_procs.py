"""Daemons are stopped by the pid they were started with, and only those."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from acbslurm.errors import SetupError
from acbslurm.sandbox import preflight
from acbslurm.sandbox.procs import Proc, kill_marked, marked_pids, read_proc, spawn, stop, wait_for


def test_spawn_stop_and_marker_sweep(tmp_path: Path) -> None:
    marker = f"test-{time.time_ns()}"
    # The child double-forks a grandchild into another session: only the marker finds it.
    script = "setsid sleep 60 & exec sleep 60"
    p = spawn(
        "t", ["sh", "-c", script], run_dir=tmp_path, log_file=tmp_path / "t.log", marker=marker
    )
    assert read_proc(tmp_path, "t") == p
    # Waits are for states, with deadlines far above what an idle machine needs: a
    # loaded 2-core machine (load 10 seen) forks and tears down slowly.
    deadline = time.monotonic() + 30
    while len(marked_pids(marker)) != 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(marked_pids(marker)) == 2, marked_pids(marker)
    assert stop(p, timeout=30) is True
    assert not p.alive()
    assert stop(p) is False  # already gone: nothing signalled
    kill_marked(marker, timeout=30)
    assert marked_pids(marker) == []


def test_recycled_pid_is_not_ours() -> None:
    me = Proc("self", os.getpid(), start_time=1)  # wrong start time
    assert not me.alive()
    assert stop(me) is False  # and so it is never signalled


def test_wait_for_names_the_component_and_shows_its_log(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("line one\nfatal: port in use\n")
    with pytest.raises(SetupError) as exc:
        wait_for("slurmctld", lambda: False, proc=None, log_file=log, timeout=0.3)
    assert "slurmctld not ready" in str(exc.value)
    assert "fatal: port in use" in str(exc.value)


def test_preflight_without_root_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(SetupError, match="needs root"):
        preflight.check()


def test_preflight_names_missing_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setitem(preflight.REQUIRED, "/nonexistent/slurmfoo", "slurm-foo")
    with pytest.raises(SetupError) as exc:
        preflight.check()
    assert "slurm-foo" in str(exc.value) and "make setup" in str(exc.value)
