"""Fault: the job user's rootless dockerd dies (SIGKILL) while a job's container runs.

The container outlives its daemon under containerd-shim and keeps its GPU. Before, the
epilog took "connection refused" for "nothing runs", exited 0, and the next job got the
same GPU while the old container still used it.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from sandboxtest import IMAGE, acbslurm_run, docker_api, submit, wait_container, wait_job

pytestmark = pytest.mark.integration


def _dockerd_pid(sb: Any) -> int:
    """The dockerd of THIS sandbox's user daemon: matched by its --data-root, not by its
    owner (several sandboxes on one machine each run a dockerd as user1, and killing
    another's broke that sandbox's tests)."""
    data_root = f"--data-root={sb.layout.docker_data(sb.user)}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            comm = Path(f"/proc/{entry}/comm").read_text().strip()
            args = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if comm == "dockerd" and data_root in args:
            return int(entry)
    raise AssertionError(f"no dockerd with {data_root.decode()} runs")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait(what: str, cond: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not after {timeout} s")
        time.sleep(0.2)


def test_a_killed_dockerd_leaks_no_container_and_no_gpu(idle: Any, scripts: Path) -> None:
    sb = idle
    api = docker_api(sb)
    job = submit(sb, scripts, "exec " + acbslurm_run(IMAGE, "sleep", "600"), "--gres=gpu:1")
    wait_job(sb, job, ("RUNNING",), 60)
    cid = wait_container(api, job)["Id"]
    pid = int(api.inspect_container(cid)["State"]["Pid"])
    # The host's view of the container's process: it carries the job's id.
    assert f"ACBSLURM_JOB_ID={job}".encode() in Path(f"/proc/{pid}/environ").read_bytes()

    os.kill(_dockerd_pid(sb), signal.SIGKILL)
    try:
        time.sleep(1)
        assert _alive(pid), "the container died with its daemon: nothing left to test"
        sb.run_slurm(["scancel", job])
        wait_job(sb, job, ("CANCELLED", "FAILED", "COMPLETED"), 60)
        # The epilog found the container without Docker and killed it.
        _wait(f"container process {pid} of job {job} ends", lambda: not _alive(pid), 30)
        node = sb.run_slurm(["sinfo", "-h", "-N", "-o", "%T"]).stdout.strip()
        assert "drain" not in node, node
    finally:
        sb.restart(f"dockerd-{sb.user}")

    # The daemon is back: the next job's prolog removes the dead job's exited container.
    api = docker_api(sb)
    assert [c["Id"] for c in api.containers(all=True, filters={"label": f"acbslurm.job_id={job}"})]
    nxt = submit(sb, scripts, "true", "--gres=gpu:1")
    wait_job(sb, nxt, ("COMPLETED",), 60)
    left = api.containers(all=True, filters={"label": f"acbslurm.job_id={job}"})
    assert left == [], left
