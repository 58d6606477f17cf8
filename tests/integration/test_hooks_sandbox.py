"""The job boundary on the real sandbox: Slurm hooks + `acbslurm run` + rootless Docker.

What Docker actually passed to the NVIDIA layer is read from the sandbox's stand-in
hook records; containers are listed from user1's real rootless daemon.
"""

from __future__ import annotations

import shlex
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sandboxtest import (
    IMAGE,
    acbslurm_run,
    docker_api,
    hook_devices,
    job_containers,
    reach_time_limit,
    submit,
    wait_container,
    wait_gone,
    wait_job,
    wait_until,
)

pytestmark = pytest.mark.integration


def test_container_exit_code_becomes_job_exit_code(idle: Any, scripts: Path) -> None:
    job = submit(idle, scripts, acbslurm_run(IMAGE, "sh", "-c", "echo out; exit 3"), "--gres=gpu:1")
    f = wait_job(idle, job, ("COMPLETED", "FAILED"), 60)
    assert f["ExitCode"] == "3:0"
    assert "out" in (scripts / f"out-{job}.txt").read_text()


def test_prolog_records_the_allocation_through_the_sandboxs_own_scontrol(
    idle: Any, scripts: Path
) -> None:
    """slurmd gives the prolog no PATH: the record's CPUs and memory come from the
    scontrol of the Slurm the sandbox runs (slurm_bin_dir), never 0 = no limits; the
    prolog environment (SLURM_JOB_GPUS, SLURM_JOB_UID) names the job's GPU and user."""
    import json

    records = idle.layout.records
    body = f'cat {records}/"$SLURM_JOB_ID".json; echo; echo "uid=$(id -u)"'
    job = submit(idle, scripts, body, "--gres=gpu:1", "-c", "2", "--mem", "1000")
    wait_job(idle, job, ("COMPLETED",), 60)
    out = (scripts / f"out-{job}.txt").read_text()
    rec = json.loads(out.splitlines()[0])
    assert (rec["cpus"], rec["mem_mb"], rec["alloc_error"]) == (2, 1000, ""), rec
    assert len(rec["gpus"]) == 1 and rec["gpus"][0]["uuid"] in {g.uuid for g in idle.gpus}
    assert f"uid={rec['uid']}" in out and rec["user"] == idle.user


def test_uuid_not_given_by_slurm_is_refused(idle: Any, scripts: Path) -> None:
    before = set(hook_devices(idle))
    uuids = " ".join(g.uuid for g in idle.gpus)
    # The job holds one GPU and asks `acbslurm run` for one it was not given.
    body = (
        f"for u in {uuids}; do\n"
        '  case ",$ACBSLURM_GPU_UUIDS," in *",$u,"*) ;; *) other=$u ;; esac\n'
        "done\n"
        'echo "other=$other"\n'
        + acbslurm_run("--gpus", "UUID", IMAGE, "echo", "should-not-run").replace(
            "UUID", '"$other"'
        )
    )
    job = submit(idle, scripts, body, "--gres=gpu:1")
    f = wait_job(idle, job, ("COMPLETED", "FAILED"), 60)
    out = (scripts / f"out-{job}.txt").read_text()
    other = out.split("other=", 1)[1].split()[0]
    assert other in uuids.split()
    assert f["ExitCode"] == "2:0", out
    assert f"GPU {other} was not given to job {job} by Slurm" in out
    assert "should-not-run" not in out
    assert set(hook_devices(idle)) == before  # no container was started


def _run_alone_after(sb: Any, scripts: Path, api: Any, gres: int) -> None:
    """The next job on the freed GPUs is the only container holding its GPU."""
    nxt = submit(sb, scripts, acbslurm_run(IMAGE, "sleep", "3"), f"--gres=gpu:{gres}")
    c = wait_container(api, nxt)
    mine = set(hook_devices(sb)[c["Id"]])
    assert mine
    others = [x for x in api.containers() if x["Id"] != c["Id"]]
    devices = hook_devices(sb)
    assert all(not (set(devices.get(x["Id"], [])) & mine) for x in others), others
    wait_job(sb, nxt, ("COMPLETED",), 60)


@pytest.mark.parametrize("how", ["scancel", "scancel-srun", "scancel-KILL", "time-limit"])
def test_no_container_survives_its_job(idle: Any, scripts: Path, how: str) -> None:
    api = docker_api(idle)
    gres = len(idle.gpus)  # all GPUs: the next job must get one of this job's
    # The container ignores SIGTERM: only the hooks' forced removal can end it in time.
    body = acbslurm_run("--grace", "30", IMAGE, "sh", "-c", "trap '' TERM; sleep 600 & wait")
    if how == "scancel-srun":
        body = "exec srun " + body  # as rendered job scripts call it: in a job step
    job = submit(idle, scripts, body, f"--gres=gpu:{gres}", "--time=10")
    wait_container(api, job)
    if how == "time-limit":
        reach_time_limit(idle, job)
    elif how in ("scancel", "scancel-srun"):
        idle.run_slurm(["scancel", job])
    elif how == "scancel-KILL":
        idle.run_slurm(["scancel", "-s", "KILL", job])
    states = ("CANCELLED", "TIMEOUT", "FAILED", "COMPLETED")
    f = wait_job(idle, job, states, 60 if how == "time-limit" else 30)
    if how == "time-limit":
        assert f["JobState"] == "TIMEOUT"
    wait_gone(idle, job)  # its epilog ran
    assert job_containers(api, job) == [], f"container of job {job} outlived its epilog"
    _run_alone_after(idle, scripts, api, 1)


def test_concurrent_jobs_never_share_a_uuid(idle: Any, scripts: Path) -> None:
    api = docker_api(idle)
    inventory = {g.uuid for g in idle.gpus}
    n_jobs = 4 * len(idle.gpus)
    jobs = [
        submit(idle, scripts, acbslurm_run(IMAGE, "sleep", "1"), "--gres=gpu:1")
        for _ in range(n_jobs)
    ]
    snapshots: list[list[str]] = []
    seen_jobs: dict[str, str] = {}  # container -> job
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            running = api.containers(filters={"label": "acbslurm.job_id"})
            snapshots.append([c["Id"] for c in running])
            for c in running:
                seen_jobs[c["Id"]] = c["Labels"]["acbslurm.job_id"]
            time.sleep(0.05)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        for j in jobs:
            f = wait_job(idle, j, ("COMPLETED", "FAILED", "CANCELLED"), 120)
            assert f["JobState"] == "COMPLETED", f
    finally:
        stop.set()
        t.join()
    devices = hook_devices(idle)
    overlapping = [s for s in snapshots if len(s) > 1]
    assert overlapping, "jobs never ran concurrently; the test proves nothing"
    for snap in snapshots:
        held = [u for cid in snap for u in devices.get(cid, [])]
        assert len(held) == len(set(held)), f"a GPU was handed to two containers: {held}"
    assert set(seen_jobs.values()) <= set(jobs)
    for cid in seen_jobs:
        assert len(devices[cid]) == 1 and devices[cid][0] in inventory


def test_scancel_stops_the_container_gracefully(idle: Any, scripts: Path) -> None:
    """With `exec acbslurm run` the container gets SIGTERM and its grace period."""
    api = docker_api(idle)
    inner = "trap 'echo got-TERM; exit 7' TERM; echo ready; sleep 600 & wait"
    job = submit(idle, scripts, "exec " + acbslurm_run(IMAGE, "sh", "-c", inner), "--gres=gpu:1")
    wait_container(api, job)
    out = scripts / f"out-{job}.txt"
    # The trap is set only once "ready" is out: a SIGTERM before it proves nothing.
    wait_until("the container to say ready", lambda: "ready" in out.read_text(), 30)
    idle.run_slurm(["scancel", job])
    wait_job(idle, job, ("CANCELLED",), 30)
    wait_gone(idle, job)  # its epilog ran
    assert job_containers(api, job) == []
    assert "got-TERM" in out.read_text()


def test_another_jobs_id_gets_none_of_its_gpus(idle: Any, scripts: Path) -> None:
    """Setting SLURM_JOB_ID to another (own, running) job's id is refused."""
    api = docker_api(idle)
    a = submit(idle, scripts, "exec " + acbslurm_run(IMAGE, "sleep", "60"), "--gres=gpu:1")
    wait_container(api, a)
    body = f"SLURM_JOB_ID={a} " + acbslurm_run(IMAGE, "echo", "stolen")
    b = submit(idle, scripts, body, "--gres=gpu:1")
    f = wait_job(idle, b, ("COMPLETED", "FAILED"), 60)
    out = (scripts / f"out-{b}.txt").read_text()
    assert f["ExitCode"] == "2:0", out
    assert f"this process is not part of Slurm job {a}" in out
    assert "stolen" not in out


def test_a_forged_record_gets_no_gpus(idle: Any, scripts: Path) -> None:
    """A job pointing ACBSLURM_RECORD_DIR at a record it wrote itself (all GPUs) is refused."""
    before = set(hook_devices(idle))
    uuids = [g.uuid for g in idle.gpus]
    forge = (
        "import json, os, pwd; j = os.environ['SLURM_JOB_ID']; d = os.environ['D']; "
        "rec = {'job_id': j, 'uid': os.getuid(), 'user': pwd.getpwuid(os.getuid()).pw_name, "
        f"'version': 2, 'gpus': [{{'uuid': u}} for u in {uuids!r}]}}; "
        "json.dump(rec, open(f'{d}/{j}.json', 'w'))"
    )
    body = (
        f"export D=$(mktemp -d); {shlex.quote(sys.executable)} -c {shlex.quote(forge)}\n"
        'export ACBSLURM_RECORD_DIR="$D"\n' + acbslurm_run(IMAGE, "echo", "forged-ran")
    )
    job = submit(idle, scripts, body, "--gres=gpu:1")
    f = wait_job(idle, job, ("COMPLETED", "FAILED"), 60)
    out = (scripts / f"out-{job}.txt").read_text()
    assert f["ExitCode"] == "2:0", out
    assert "is not root-owned and writable by root alone" in out
    assert "forged-ran" not in out
    assert set(hook_devices(idle)) == before  # no container was started
