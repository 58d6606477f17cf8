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
from sandboxtest import (
    IMAGE,
    acbslurm_run,
    docker_api,
    dockerd_pid,
    submit,
    wait_container,
    wait_job,
)

from acbslurm.sandbox.procs import running

pytestmark = pytest.mark.integration


def _wait(what: str, cond: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not after {timeout} s")
        time.sleep(0.2)


def test_a_killed_dockerd_leaks_no_container_and_no_gpu(idle: Any, scripts: Path) -> None:
    sb = idle
    api = docker_api(sb)
    # After `acbslurm run` ends, the job goes on (as a job script may): the container its
    # dead daemon leaves is an orphan only the epilog can end.
    body = f"{acbslurm_run(IMAGE, 'sleep', '600')}\necho run exit $?\nsleep 300"
    job = submit(sb, scripts, body, "--gres=gpu:1")
    wait_job(sb, job, ("RUNNING",), 60)
    cid = wait_container(api, job)["Id"]
    pid = int(api.inspect_container(cid)["State"]["Pid"])
    # The host's view of the container's process: it carries the job's id.
    assert f"ACBSLURM_JOB_ID={job}".encode() in Path(f"/proc/{pid}/environ").read_bytes()
    out = scripts / f"out-{job}.txt"

    os.kill(dockerd_pid(sb), signal.SIGKILL)
    try:
        # `acbslurm run` does not hang: it says why and exits 125 (not the program's code).
        _wait("acbslurm run to end", lambda: "run exit" in out.read_text(errors="replace"), 60)
        text = out.read_text(errors="replace")
        assert "run exit 125" in text and "the Docker daemon went away" in text, text
        assert "Traceback" not in text
        assert running(pid), "the container died with its daemon: nothing left to test"
        sb.run_slurm(["scancel", job])
        wait_job(sb, job, ("CANCELLED", "FAILED", "COMPLETED"), 60)
        # The epilog found the container without Docker and killed it.
        _wait(f"container process {pid} of job {job} ends", lambda: not running(pid), 30)
        # Slurm 25.11 shows CANCELLED while the epilog still runs (COMPLETING): the daemon
        # comes back only once the epilog is done, so it is the next job's to sweep.
        _wait(
            f"job {job} to leave the queue",
            lambda: not sb.run_slurm(["squeue", "-h", "-j", job], check=False).stdout.strip(),
            60,
        )
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
