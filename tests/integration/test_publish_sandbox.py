"""A service in a job (issue 28, item 3): `acbslurm run -p` publishes the container's
port on the node, through the sandbox's real rootless Docker (rootlesskit's port
driver), and a second job asking for the same port is refused, never given the first
job's traffic. Driven as user1."""

from __future__ import annotations

import socket
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from sandboxtest import IMAGE, acbslurm_run, submit, wait_container, wait_job, wait_until

pytestmark = pytest.mark.integration

SERVE = (
    "mkdir -p /www && echo hello-from-job-$SLURM_JOB_ID > /www/index.html && "
    "exec httpd -f -p 8080 -h /www"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as r:
            return str(r.read().decode())
    except OSError:
        return ""


def test_a_published_port_reaches_the_jobs_service_and_is_its_own(idle: Any, scripts: Path) -> None:
    from sandboxtest import docker_api

    sb = idle
    port = _free_port()
    run = acbslurm_run("-p", f"{port}:8080", IMAGE, "--", "sh", "-c", SERVE)
    job = submit(sb, scripts, f"exec {run}", "--gres=gpu:1")
    wait_job(sb, job, ("RUNNING",), 60)
    wait_container(docker_api(sb), job)
    got = wait_until(f"the job's page on port {port}", lambda: _get(port), timeout=30)
    assert got.strip() == f"hello-from-job-{job}"

    # The same port for a second job on this node: refused before anything starts.
    second = submit(sb, scripts, f"exec {run}", "--gres=gpu:1")
    done = wait_job(sb, second, ("FAILED", "COMPLETED"), 60)
    out = (scripts / f"out-{second}.txt").read_text()
    assert done["JobState"] == "FAILED" and done["ExitCode"] == "2:0", (done, out)
    assert f"port {port} of this node is taken" in out, out
    assert _get(port).strip() == f"hello-from-job-{job}"  # still the first job's
    sb.run_slurm(["scancel", job])
    wait_job(sb, job, ("CANCELLED",), 60)
    wait_until("the port freed", lambda: not _get(port), timeout=30)
