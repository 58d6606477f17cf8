"""Faults of the job user's rootless dockerd while a job's container runs: killed
(SIGKILL) or stopped gracefully (SIGTERM, as `systemctl stop`).

A killed daemon's container outlives it under containerd-shim and keeps its GPU. Before,
the epilog took "connection refused" for "nothing runs", exited 0, and the next job got
the same GPU while the old container still used it. A daemon stopped gracefully stops
the container itself (exit 143): the job's output must say why, not just end with 143.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path
from typing import Any

import pytest
from sandboxtest import (
    IMAGE,
    acbslurm_run,
    container_job,
    docker_api,
    dockerd_pid,
    hook_devices,
    job_containers,
    submit,
    wait_job,
    wait_until,
)

from acbslurm.config import load_settings
from acbslurm.hooks.orphans import job_processes, unswept
from acbslurm.procfs import running

pytestmark = pytest.mark.integration


def record_dir(sb: Any) -> Path:
    return Path(load_settings(str(sb.layout.acbslurm_conf)).record_dir)


def in_queue(sb: Any, job: str) -> bool:
    """Pending, running or completing (its epilog not done yet)."""
    return bool(sb.run_slurm(["squeue", "-h", "-j", job], check=False).stdout.strip())


def text_of(path: Path) -> str:
    """A job's output so far ("" before slurmstepd has created it)."""
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def node_state(sb: Any) -> str:
    out = sb.run_slurm(["scontrol", "show", "node", "-o"]).stdout
    return dict(t.partition("=")[::2] for t in out.split() if "=" in t)["State"]


def test_a_killed_dockerd_leaks_no_container_and_no_gpu(idle: Any, scripts: Path) -> None:
    sb = idle
    api = docker_api(sb)
    # After `acbslurm run` ends, the job goes on (as a job script may): the container its
    # dead daemon leaves is an orphan only the epilog can end.
    body = f"{acbslurm_run(IMAGE, 'sleep', '600')}\necho run exit $?\nsleep 300"
    job, container = container_job(sb, api, scripts, body)
    cid = container["Id"]
    old_gpus = set(hook_devices(sb)[cid])
    assert len(old_gpus) == 1, old_gpus
    pid = int(api.inspect_container(cid)["State"]["Pid"])
    # The host's view of the container's process: it carries the job's id.
    assert f"ACBSLURM_JOB_ID={job}".encode() in Path(f"/proc/{pid}/environ").read_bytes()
    out = scripts / f"out-{job}.txt"

    os.kill(dockerd_pid(sb), signal.SIGKILL)
    try:
        # `acbslurm run` does not hang: it says why and exits 125 (not the program's code).
        wait_until("acbslurm run to end", lambda: "run exit" in text_of(out))
        text = text_of(out)
        assert "run exit 125" in text and "the Docker daemon went away" in text, text
        assert "Traceback" not in text
        assert running(pid), "the container died with its daemon: nothing left to test"
        sb.run_slurm(["scancel", job])
        wait_job(sb, job, ("CANCELLED", "FAILED", "COMPLETED"), 60)
        # The epilog found the container without Docker and killed it.
        wait_until(f"container process {pid} of job {job} ends", lambda: not running(pid), 30)
        # Slurm 25.11 shows CANCELLED while the epilog still runs (COMPLETING): the daemon
        # comes back only once the epilog is done, so it is the next job's to sweep.
        wait_until(f"job {job} to leave the queue", lambda: not in_queue(sb, job))
        assert "DRAIN" not in node_state(sb)
        # The epilog removed the job's record (nothing can claim its GPU through it) and
        # noted the job for the sweep once the daemon answers again.
        assert not (record_dir(sb) / f"{job}.json").exists()
        assert job in unswept(str(record_dir(sb)), sb.uid)
    finally:
        sb.restart(f"dockerd-{sb.user}")

    api = docker_api(sb)
    assert job_containers(api, job), "the dead daemon's state lost the exited container"
    # The next job takes both GPUs, the dead job's among them: while it runs, no
    # container (the daemon's, or an orphan of the dead job) may hold one of them.
    nxt = submit(sb, scripts, 'echo "gpus=$ACBSLURM_GPU_UUIDS"\nsleep 300', "--gres=gpu:2")
    wait_job(sb, nxt, ("RUNNING",), 60)
    nxt_out = scripts / f"out-{nxt}.txt"
    line = wait_until(
        f"job {nxt} prints its GPUs",
        lambda: next((x for x in text_of(nxt_out).splitlines() if x.startswith("gpus=")), ""),
    )
    nxt_gpus = set(line.removeprefix("gpus=").split(","))
    assert old_gpus <= nxt_gpus and len(nxt_gpus) == 2, (old_gpus, line)
    devices = hook_devices(sb)
    busy = {d for c in api.containers() for d in devices.get(c["Id"], [])}
    if job_processes(job, sb.uid, sb.user):
        busy |= old_gpus
    assert not busy & nxt_gpus, f"GPUs {busy & nxt_gpus} double-booked"
    # Its prolog, with the daemon back, removed the dead job's exited container.
    assert job_containers(api, job) == []
    assert job not in unswept(str(record_dir(sb)), sb.uid)


def test_a_dockerd_stopped_gracefully_says_so_in_the_job(idle: Any, scripts: Path) -> None:
    sb = idle
    api = docker_api(sb)
    job, _ = container_job(sb, api, scripts, "exec " + acbslurm_run(IMAGE, "sleep", "600"))
    try:
        # SIGTERM to dockerd alone (systemd's KillMode=mixed): it closes its API, stops
        # the container (143), then exits. Not the sandbox's stop_component: that signals
        # the whole group, rootlesskit included, which may take dockerd down before it
        # has stopped the container (then the container runs on, and `acbslurm run`
        # rightly says the daemon went away; seen in CI).
        daemon = dockerd_pid(sb)
        os.kill(daemon, signal.SIGTERM)
        wait_until("dockerd to exit", lambda: not running(daemon), 60)
        f = wait_job(sb, job, ("FAILED", "COMPLETED", "CANCELLED"), 60)
        text = text_of(scripts / f"out-{job}.txt")
        assert "Error: the Docker daemon stopped while the container ran" in text, text
        # With the container's code when the open /wait got it (most runs), without
        # when the stopping daemon ended that connection first (seen in CI).
        assert re.search(r"it stopped the container( \(exit code 143\))?\n", text), text
        assert "Traceback" not in text
        # 125, Docker's own trouble, not the program's 143: the job failed with it.
        assert (f["JobState"], f["ExitCode"]) == ("FAILED", "125:0"), f
        wait_until(f"job {job} to leave the queue", lambda: not in_queue(sb, job))
        assert not (record_dir(sb) / f"{job}.json").exists()
        assert "DRAIN" not in node_state(sb)
    finally:
        sb.restart(f"dockerd-{sb.user}")
    # The daemon kept the stopped container (nobody could remove it meanwhile): the
    # next job's prolog does, and the node is idle, not drained.
    api = docker_api(sb)
    assert job_containers(api, job), "no stopped container: nothing left to test"
    nxt = submit(sb, scripts, "true", "--gres=gpu:1")
    wait_job(sb, nxt, ("COMPLETED",), 60)
    assert job_containers(api, job) == []
    wait_until("the node idle", lambda: node_state(sb) == "IDLE")
