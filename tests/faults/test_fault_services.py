"""Faults: MariaDB, slurmdbd or slurmctld down, and a frozen dockerd.

Each case checks what the user sees (message, exit code, no traceback) and what is left
(no container, the node idle or drained with a reason that names the job).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from sandboxtest import (
    IMAGE,
    REPO,
    acbslurm_run,
    container_job,
    docker_api,
    dockerd_pid,
    job_containers,
    submit,
    wait_job,
)

pytestmark = pytest.mark.integration


def acbslurm(sb: Any, *args: str, user: str = "user1") -> Any:
    if user == "root":
        return sb.run_slurm([sys.executable, "-m", "acbslurm", *args], check=False, timeout=60)
    return sb.run_as(
        user,
        [sys.executable, "-m", "acbslurm", *args],
        extra_env={"PYTHONPATH": str(REPO)},
        check=False,
        timeout=60,
    )


def no_traceback(r: Any) -> None:
    assert "Traceback" not in r.stdout + r.stderr, r.stderr


def test_mariadb_down_the_report_says_so(idle: Any) -> None:
    sb = idle
    sb.stop_component("mariadb")
    try:
        r = acbslurm(sb, "report", "--by", "user", user="root")
        assert r.returncode == 1 and r.stderr.startswith(
            "Error: cannot reach the accounting database"
        ), r.stderr
        no_traceback(r)
    finally:
        sb.restart("mariadb")
    r = acbslurm(sb, "report", "--by", "user", user="root")
    assert r.returncode == 0, r.stderr


def test_slurmdbd_down_status_still_shows_what_slurmctld_knows(idle: Any, scripts: Path) -> None:
    sb = idle
    job = submit(sb, scripts, "sleep 30", "--gres=gpu:1")
    wait_job(sb, job, ("RUNNING",), 60)
    sb.stop_component("slurmdbd")
    try:
        r = acbslurm(sb, "status", job, "99999999")
        no_traceback(r)
        assert r.returncode == 1
        row = next(line for line in r.stdout.splitlines() if line.startswith(job + " "))
        assert "RUNNING" in row
        assert "cannot tell about job 99999999: slurmdbd not answering" in r.stderr
        # The report reads MariaDB itself: slurmdbd down does not stop it.
        assert acbslurm(sb, "report", "--by", "user", user="root").returncode == 0
    finally:
        sb.restart("slurmdbd")


def test_slurmctld_down_commands_say_so_and_jobs_go_on(idle: Any, scripts: Path) -> None:
    sb = idle
    api = docker_api(sb)
    job, _ = container_job(sb, api, scripts, "exec " + acbslurm_run(IMAGE, "sleep", "8"))
    sb.stop_component("slurmctld")
    try:
        r = acbslurm(sb, "status", job)
        no_traceback(r)
        assert r.returncode == 1 and "Unable to contact slurm controller" in r.stderr
        spec = REPO / "conf" / "examples" / "sandbox-gpu.yaml"
        r = acbslurm(sb, "submit", str(spec), "--set", "account=user1")
        no_traceback(r)
        assert r.returncode == 1 and "Batch job submission failed" in r.stderr
    finally:
        sb.restart("slurmctld")
    f = wait_job(sb, job, ("COMPLETED", "FAILED", "CANCELLED"), 90)
    assert f["JobState"] == "COMPLETED", f
    deadline = time.monotonic() + 30
    while job_containers(api, job):
        assert time.monotonic() < deadline, "the job's container outlived it"
        time.sleep(0.3)


def test_a_frozen_dockerd_drains_the_node_naming_the_job(idle: Any, scripts: Path) -> None:
    sb = idle
    api = docker_api(sb)
    job, container = container_job(sb, api, scripts, "exec " + acbslurm_run(IMAGE, "sleep", "600"))
    cid = container["Id"]
    dockerd = dockerd_pid(sb)
    os.kill(dockerd, signal.SIGSTOP)
    try:
        sb.run_slurm(["scancel", job])
        deadline = time.monotonic() + 90
        while True:
            node = sb.run_slurm(["scontrol", "show", "node", "-o"]).stdout
            if "DRAIN" in node:
                break
            assert time.monotonic() < deadline, f"node not drained: {node}"
            time.sleep(0.5)
        # The node's reason says which job may still hold a GPU.
        assert f"acbslurm: job {job}" in node, node
    finally:
        os.kill(dockerd, signal.SIGCONT)
    # What the admin does: remove the container, then resume the node (wait_idle).
    api.remove_container(cid, force=True)
    sb.wait_idle(timeout=60)
