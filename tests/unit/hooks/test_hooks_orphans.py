"""Finding and killing a job's container processes without Docker (its daemon is gone)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from acbslurm.hooks.orphans import (
    device_holders,
    forget_unswept,
    job_processes,
    kill_job_processes,
    remember_unswept,
    subuid_ranges,
    unswept,
)


def _sleeper(job: str | None, *extra: str) -> subprocess.Popen[bytes]:
    env = {"PATH": os.environ["PATH"]}
    if job is not None:
        env["ACBSLURM_JOB_ID"] = job
    return subprocess.Popen(
        [sys.executable, "-c", "import sys, time; f = [open(p) for p in sys.argv[1:]]; "
         "print('up', flush=True); time.sleep(60)", *extra],
        env=env,
        stdout=subprocess.PIPE,
    )  # fmt: skip


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        p.kill()
        p.wait()
        if p.stdout is not None:
            p.stdout.close()


def _start(procs: list[subprocess.Popen[bytes]], job: str | None, *extra: str) -> int:
    p = _sleeper(job, *extra)
    procs.append(p)
    assert p.stdout is not None and p.stdout.readline() == b"up\n"  # its files are open
    return p.pid


def test_finds_and_kills_only_the_jobs_processes(procs: list[subprocess.Popen[bytes]]) -> None:
    mine = _start(procs, "424242")
    other = _start(procs, "424243")
    plain = _start(procs, None)
    uid = os.getuid()
    assert job_processes("424242", uid, "") == [mine]
    assert job_processes("424242", uid + 1, "") == []  # another user's job: not ours
    killed, left = kill_job_processes("424242", uid, "")
    assert killed == [mine] and left == []
    assert procs[0].wait(5) == -9
    assert procs[1].poll() is None and procs[2].poll() is None
    assert job_processes("424243", uid, "") == [other] and plain not in killed


def test_subuid_ranges_count_as_the_users(tmp_path: Path) -> None:
    f = tmp_path / "subuid"
    f.write_text("user1:100000:65536\nuser2:165536:65536\nbad:x:1\n")
    assert subuid_ranges("user1", str(f)) == [(100000, 65536)]
    assert subuid_ranges("nobody", str(f)) == []
    assert subuid_ranges("user1", str(tmp_path / "missing")) == []


def test_device_holders_by_device_number(procs: list[subprocess.Popen[bytes]]) -> None:
    holder = _start(procs, None, "/dev/zero")
    assert holder in device_holders(["/dev/zero"], os.getuid(), "")
    assert device_holders(["/nonexistent/nvidia9"], os.getuid(), "") == []


def test_unswept_jobs_are_remembered_per_user(tmp_path: Path) -> None:
    d = str(tmp_path)
    assert unswept(d, 1001) == []
    remember_unswept(d, 1001, "5")
    remember_unswept(d, 1001, "6")
    remember_unswept(d, 1001, "5")
    remember_unswept(d, 1002, "7")
    assert unswept(d, 1001) == ["5", "6"] and unswept(d, 1002) == ["7"]
    forget_unswept(d, 1001, ["5"])
    assert unswept(d, 1001) == ["6"]
    forget_unswept(d, 1001, ["6"])
    assert unswept(d, 1001) == [] and not (tmp_path / "unswept" / "1001").exists()
