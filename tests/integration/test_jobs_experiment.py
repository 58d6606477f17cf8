"""The GPU-queue experiment on the real sandbox (2 GPUs): 1, 2, then 4 one-GPU jobs.

Jobs are submitted AS the sandbox user through `acbslurm submit`, and followed with
`acbslurm status --json`, so the CLI, the renderer and the Slurm backend are all real.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sandboxtest import no_jobs

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "conf" / "examples" / "sandbox-gpu.yaml"


def acbslurm(sandbox: Any, *args: str, check: bool = True) -> Any:
    return sandbox.run_as_user(
        [sys.executable, "-m", "acbslurm", *args],
        extra_env={"PYTHONPATH": str(REPO)},
        check=check,
        timeout=120,
    )


class Gate:
    """A job command that runs until the test opens the gate (creates a file), so a job
    ends once the test has seen what it waits for, never after a guessed time: slurmctld
    starts a batch job up to batch_sched_delay (3 s by default, every release) after its
    submission, so two jobs submitted together may start 3 s apart (26.05.3's leg: a 4 s
    job ended 1 s after the second one started, before the test saw both running)."""

    def __init__(self, directory: Path, name: str) -> None:
        self.path = directory / name

    def command(self) -> str:
        return f"command=[sh, -c, 'until [ -e {self.path} ]; do sleep 0.2; done']"

    def open(self) -> None:
        self.path.touch()


@pytest.fixture
def gates() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="acbslurm-gates-"))
    d.chmod(0o755)  # the jobs run as the sandbox user and look for the files
    yield d
    shutil.rmtree(d, ignore_errors=True)


def submit(sandbox: Any, count: int, hold: int | Gate, *sets: str) -> list[str]:
    command = hold.command() if isinstance(hold, Gate) else f"command=[sleep, '{hold}']"
    res = acbslurm(
        sandbox,
        "submit",
        str(SPEC),
        "-n",
        str(count),
        "--json",
        *sets,
        "--set",
        "account=user1",
        "--set",
        "container=",
        "--set",
        command,
        "--set",
        "output=/dev/null",
    )
    ids: list[str] = json.loads(res.stdout)["job_ids"]
    assert len(ids) == count
    return ids


def status(sandbox: Any, ids: list[str]) -> dict[str, dict[str, Any]]:
    # Exit 1 names ids Slurm does not show (yet: an array's tasks before they split off).
    res = acbslurm(sandbox, "status", "--json", *ids, check=False)
    assert res.returncode in (0, 1), res.stderr
    return {j["job_id"]: j for j in json.loads(res.stdout)["jobs"]}


def wait_for(sandbox: Any, ids: list[str], pred: Any, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        jobs = status(sandbox, ids)
        if pred(jobs):
            return jobs
        assert time.monotonic() < deadline, f"timed out; last status {jobs}"
        time.sleep(0.5)


@pytest.fixture
def idle(sandbox: Any) -> Any:
    assert len(sandbox.gpus) == 2, "the experiment needs a sandbox with 2 GPUs"
    no_jobs(sandbox)
    yield sandbox
    no_jobs(sandbox)


def test_one_job_gets_one_gpu(idle: Any, gates: Path) -> None:
    gate = Gate(gates, "end")
    ids = submit(idle, 1, gate)
    jobs = wait_for(idle, ids, lambda j: j[ids[0]]["state"] == "RUNNING")
    assert len(jobs[ids[0]]["gpu_indices"]) == 1
    gate.open()
    wait_for(idle, ids, lambda j: j[ids[0]]["state"] == "COMPLETED")


def test_two_jobs_run_at_once_on_different_gpus(idle: Any, gates: Path) -> None:
    gate = Gate(gates, "end")
    ids = submit(idle, 2, gate)
    jobs = wait_for(idle, ids, lambda j: all(x["state"] == "RUNNING" for x in j.values()))
    gpus = [jobs[i]["gpu_indices"] for i in ids]
    assert all(len(g) == 1 for g in gpus)
    assert gpus[0] != gpus[1]
    gate.open()
    wait_for(idle, ids, lambda j: all(x["state"] == "COMPLETED" for x in j.values()))


def test_four_jobs_two_run_two_pend_then_take_the_freed_gpu(idle: Any, gates: Path) -> None:
    short, long = Gate(gates, "short"), Gate(gates, "long")
    first = submit(idle, 1, short)  # ends first: frees its GPU while the second still runs
    rest = submit(idle, 3, long)
    ids = first + rest

    def two_running_two_resources(j: dict[str, Any]) -> bool:
        running = [i for i in ids if j[i]["state"] == "RUNNING"]
        pending = [i for i in ids if j[i]["state"] == "PENDING"]
        # the job behind the first waiting one may say Priority until the next pass
        return len(running) == 2 and len(pending) == 2 and j[pending[0]]["reason"] == "Resources"

    jobs = wait_for(idle, ids, two_running_two_resources, timeout=30)
    running = [jobs[i] for i in ids if jobs[i]["state"] == "RUNNING"]
    pending = [jobs[i] for i in ids if jobs[i]["state"] == "PENDING"]
    assert {r["job_id"] for r in running} == set(ids[:2])
    assert sorted(r["gpu_indices"][0] for r in running) == [0, 1]
    assert all(p["reason"] in ("Resources", "Priority") for p in pending)
    assert any(p["reason"] == "Resources" for p in pending)
    freed_gpu = jobs[ids[0]]["gpu_indices"]
    busy_gpu = jobs[ids[1]]["gpu_indices"]

    # the short job ends; the first waiting job starts on exactly its GPU, and the last
    # one (Priority until the scheduler's next pass) waits for Resources
    short.open()
    jobs = wait_for(
        idle,
        ids,
        lambda j: j[ids[2]]["state"] == "RUNNING" and j[ids[3]]["reason"] == "Resources",
        timeout=30,
    )
    assert jobs[ids[0]]["state"] == "COMPLETED"
    assert jobs[ids[2]]["gpu_indices"] == freed_gpu
    assert jobs[ids[1]]["state"] == "RUNNING"
    assert jobs[ids[1]]["gpu_indices"] == busy_gpu
    assert jobs[ids[3]]["state"] == "PENDING"
    long.open()
    wait_for(idle, ids, lambda j: all(x["state"] == "COMPLETED" for x in j.values()))


def test_array_tasks_show_their_own_gpus(idle: Any, gates: Path) -> None:
    gate = Gate(gates, "end")
    (array,) = submit(idle, 1, gate, "--set", "array=0-1")
    tasks = [f"{array}_0", f"{array}_1"]
    # RUNNING comes as the prolog starts; the UUIDs once it has written the job record
    jobs = wait_for(
        idle,
        tasks,
        # both tasks listed (not yet split off they are "unknown"), running, recorded
        lambda j: (
            set(j) == set(tasks)
            and all(x["state"] == "RUNNING" and x["gpu_uuids"] for x in j.values())
        ),
    )
    # Slurm's index -> the sandbox GPU with that minor (gres.conf lists /dev/nvidia[0-1])
    uuid_of = {g.minor: g.uuid for g in idle.gpus}
    gpus = [jobs[t]["gpu_indices"] for t in tasks]
    assert all(len(g) == 1 for g in gpus), jobs
    assert sorted(g[0] for g in gpus) == [0, 1]
    for t, g in zip(tasks, gpus, strict=True):
        assert jobs[t]["gpu_uuids"] == [uuid_of[g[0]]], jobs  # the task's own job record
    gate.open()
    wait_for(
        idle,
        tasks,
        lambda j: set(j) == set(tasks) and all(x["state"] == "COMPLETED" for x in j.values()),
    )


def test_an_array_id_stands_for_its_tasks(idle: Any) -> None:
    # 3 one-GPU tasks on 2 GPUs: two run, one waits; the array's id covers all three.
    (array,) = submit(idle, 1, 60, "--set", "array=0-2")
    jobs = wait_for(
        idle,
        [array],
        lambda j: sorted(x["state"] for x in j.values()).count("RUNNING") == 2,
    )
    assert all(x["array_job_id"] == array for x in jobs.values()), jobs
    assert {f"{array}_0", f"{array}_1"} <= set(jobs), jobs
    res = acbslurm(idle, "cancel", array)
    assert res.stdout.strip() == f"Cancelled {array}"
    jobs = wait_for(
        idle, [array], lambda j: j and all(x["state"] == "CANCELLED" for x in j.values())
    )
    assert len(jobs) >= 2, jobs  # the waiting task may be listed as 2 or as [2]
    again = acbslurm(idle, "cancel", array)
    assert f"Job {array} had already ended (CANCELLED)" in again.stdout
    # --wait follows every task of an array to its end, and fails if one fails
    res = acbslurm(
        idle,
        "submit",
        str(SPEC),
        "--json",
        "--wait",
        "--interval",
        "0.5",
        "--set",
        "array=0-1",
        "--set",
        "account=user1",
        "--set",
        "container=",
        "--set",
        "command=[sh, -c, 'exit $SLURM_ARRAY_TASK_ID']",
        "--set",
        "output=/dev/null",
        check=False,
    )
    assert res.returncode == 1, res.stderr
    out = json.loads(res.stdout)
    assert {j["array_job_id"] for j in out["jobs"]} == set(out["job_ids"]), out
    states = {j["job_id"]: j["state"] for j in out["jobs"]}
    (array,) = out["job_ids"]
    assert states == {f"{array}_0": "COMPLETED", f"{array}_1": "FAILED"}, out
    assert "1 of 2 jobs did not complete" in res.stderr


def test_bad_spec_submits_nothing(idle: Any, tmp_path: Path) -> None:
    # A subset, not equal: an earlier test's ended job leaves squeue's list MinJobAge
    # (600 s) after it ended, which can fall between the two calls late in a long run;
    # a submission would add an id.
    ids = ["squeue", "-h", "-t", "all", "-o", "%i"]
    before = set(idle.run_slurm(ids).stdout.split())
    res = acbslurm(idle, "submit", str(SPEC), "--set", "gpus=0", "--set", "mem=2X", check=False)
    assert res.returncode == 2
    assert "gpus" in res.stderr and "mem" in res.stderr and "Traceback" not in res.stderr
    after = set(idle.run_slurm(ids).stdout.split())
    assert after <= before, f"new jobs: {sorted(after - before)}"


def test_slurm_error_is_a_clear_message(idle: Any) -> None:
    # Checked before submitting: a usage error naming the partition.
    res = acbslurm(idle, "submit", str(SPEC), "--set", "partition=nosuchpart", check=False)
    assert res.returncode == 2 and "partition 'nosuchpart' does not exist" in res.stderr
    assert "Traceback" not in res.stderr
    # Past the check, sbatch's own refusal: the command, its exit code and its words.
    res = acbslurm(
        idle, "submit", "--no-check", str(SPEC), "--set", "partition=nosuchpart", check=False
    )
    assert res.returncode == 1
    assert "sbatch --parsable" in res.stderr and "exited with code 1" in res.stderr
    assert "invalid partition" in res.stderr.lower()
    assert "Traceback" not in res.stderr


def test_cancel_names_unknown_and_ended_jobs(idle: Any) -> None:
    ids = submit(idle, 1, 60)
    res = acbslurm(idle, "cancel", ids[0], "99999999", check=False)
    assert res.returncode == 1
    assert f"Cancelled {ids[0]}" in res.stdout
    assert "no such job: 99999999" in res.stderr
    wait_for(idle, ids, lambda j: j[ids[0]]["state"] == "CANCELLED")
    again = acbslurm(idle, "cancel", ids[0], check=False)
    assert again.returncode == 0 and "already ended (CANCELLED)" in again.stdout


def test_demo_reports_the_experiment(idle: Any) -> None:
    res = idle.run_slurm(
        [
            sys.executable,
            "-m",
            "acbslurm",
            "demo",
            "--dir",
            str(idle.layout.root),
            "--no-container",
            # Longer than slurmctld's batch_sched_delay (3 s): two jobs submitted together
            # may start that far apart, and must still overlap (a 3 s hold failed so).
            "--hold",
            "6",
            "--json",
        ],
        extra_env={"PYTHONPATH": str(REPO)},
        check=False,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    out = json.loads(res.stdout)
    assert out["ok"] is True
    assert [p["count"] for p in out["phases"]] == [1, 2, 4]
    four = out["phases"][2]["jobs"]
    assert sum(1 for j in four if "Resources" in j["pending_reasons"]) >= 1
    assert all(j["gpu_uuids"] and j["gpu_uuids"][0].startswith("GPU-") for j in four)
