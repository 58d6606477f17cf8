"""A service in a job (issue 28, item 3): `acbslurm run -p` publishes the container's
port on the node, through the sandbox's real rootless Docker (rootlesskit's port
driver), and a second job asking for the same port is refused, never given the first
job's traffic. Driven as user1."""

from __future__ import annotations

import json
import pwd
import re
import socket
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from sandboxtest import (
    IMAGE,
    acbslurm_as,
    acbslurm_run,
    job_status,
    submit,
    wait_container,
    wait_job,
    wait_until,
)

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


def test_a_port_the_daemon_picks_is_told_in_the_jobs_output(idle: Any, scripts: Path) -> None:
    """`-p 8080` alone: the daemon picks the node's port, and the job's output says which
    (`acbslurm: published 8080/tcp at vm:PORT`), which reaches the service."""
    sb = idle
    run = acbslurm_run("-p", "8080", IMAGE, "--", "sh", "-c", SERVE)
    job = submit(sb, scripts, f"exec {run}", "--gres=gpu:1")
    out = scripts / f"out-{job}.txt"
    said = wait_until(
        "the published line",
        lambda: (
            out.exists() and re.search(r"published 8080/tcp at ([^:\s]+):([0-9]+)", out.read_text())
        ),
        timeout=60,
    )
    assert said.group(1) == sb.params.node, out.read_text()
    got = wait_until("the job's page", lambda: _get(int(said.group(2))), timeout=30)
    assert got.strip() == f"hello-from-job-{job}"
    # `acbslurm status` shows the job's user where it is published (a file the run
    # keeps in the job's working directory, user1's home), and user2 nothing of it.
    where = f"{said.group(1)}:{said.group(2)}"
    row = job_status(sb, "user1", job)
    assert row["published"] == [{"node": sb.params.node, "port": "8080/tcp", "address": where}]
    table = acbslurm_as(sb, "user1", "status", job)
    assert f"job {job} publishes 8080/tcp at {where}" in table.stdout, table.stdout
    theirs = acbslurm_as(sb, "user2", "status", "--json", job)
    assert all(j["published"] == [] for j in json.loads(theirs.stdout or '{"jobs": []}')["jobs"])
    kept = list(Path(pwd.getpwnam(sb.user).pw_dir).glob(f"acbslurm-ports-{job}.*"))
    assert len(kept) == 1 and kept[0].stat().st_mode & 0o777 == 0o600, kept
    sb.run_slurm(["scancel", job])
    wait_job(sb, job, ("CANCELLED",), 60)
    # The run removed it as it ended.
    wait_until("the ports file gone", lambda: not kept[0].exists(), timeout=30)


def test_the_daemons_own_network_is_refused_as_host_and_none_has_no_network(
    idle: Any, scripts: Path
) -> None:
    """The sandbox's rootless daemons run without --detach-netns, as Docker 20.10 to 28.5
    are set up: their host network is rootlesskit's namespace, not the node's, so
    `--network host` is refused there with what to do (exit 2); `--network none` leaves
    the container only its loopback."""
    sb = idle
    host = acbslurm_run("--network", "host", IMAGE, "--", "true")
    job = submit(sb, scripts, f"exec {host}", "--gres=gpu:1")
    done = wait_job(sb, job, ("FAILED", "COMPLETED"), 60)
    out = (scripts / f"out-{job}.txt").read_text()
    assert done["ExitCode"] == "2:0", (done, out)
    assert "--network host: this node's Docker daemon runs in a network namespace" in out, out
    assert "DOCKERD_ROOTLESS_ROOTLESSKIT_DETACH_NETNS=true" in out, out

    none = acbslurm_run("--network", "none", IMAGE, "--", "cat", "/proc/net/dev")
    job = submit(sb, scripts, f"exec {none}", "--gres=gpu:1")
    done = wait_job(sb, job, ("FAILED", "COMPLETED"), 60)
    out = (scripts / f"out-{job}.txt").read_text()
    assert done["JobState"] == "COMPLETED", (done, out)
    devices = [ln.split(":")[0].strip() for ln in out.splitlines() if ":" in ln]
    assert devices == ["lo"], out


def test_a_device_the_site_lists_reaches_the_container_and_a_gpus_never(
    idle: Any, scripts: Path
) -> None:
    """The sandbox's settings list /dev/net/tun (container_devices), as a site lists
    /dev/infiniband: `--device` gives it to the container. An emulated GPU's device
    file, even by its own path, is refused before anything starts (exit 2)."""
    sb = idle
    ok = acbslurm_run("--device", "/dev/net/tun", IMAGE, "--", "ls", "-l", "/dev/net/tun")
    job = submit(sb, scripts, f"exec {ok}", "--gres=gpu:1")
    done = wait_job(sb, job, ("FAILED", "COMPLETED"), 60)
    out = (scripts / f"out-{job}.txt").read_text()
    assert done["JobState"] == "COMPLETED", (done, out)
    assert re.search(r"^c.* 10, +200 .*/dev/net/tun$", out, re.MULTILINE), out

    gpu = str(sb.layout.dev / "nvidia0")
    bad = acbslurm_run("--device", gpu, IMAGE, "--", "true")
    job = submit(sb, scripts, f"exec {bad}", "--gres=gpu:1")
    done = wait_job(sb, job, ("FAILED", "COMPLETED"), 60)
    out = (scripts / f"out-{job}.txt").read_text()
    assert done["ExitCode"] == "2:0", (done, out)
    assert f"'{gpu}' (from '{gpu}') is a GPU's: GPUs come only as the job's" in out, out
