"""Queries ask Slurm about the caller's jobs only, and the watcher never asks twice.

A busy production controller must not dump its whole queue for every ``--wait``:
squeue is scoped to the caller's ids, scontrol is asked once per running job (its GPUs
never change while it runs; more than 16 at once: one listing), and a job that reached
a final state is not asked again.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_slurm import Call, FakeSlurm

from acbslurm.errors import SlurmError
from acbslurm.slurm.jobparse import SQUEUE_FORMAT
from acbslurm.slurm.jobs import query_jobs
from acbslurm.slurm.jobtypes import JobInfo
from acbslurm.slurm.watch import watch_jobs

T0 = "2026-11-30T01:00:00"
T1 = "2026-11-30T01:00:05"


def asked(call: Call) -> list[str]:
    """The ids a squeue call was scoped to (``--jobs=1,2``, ``-j1,2`` or ``-j 1,2``)."""
    for i, word in enumerate(call.argv):
        if word.startswith("--jobs="):
            return word.split("=", 1)[1].split(",")
        if word == "-j":
            return call.argv[i + 1].split(",")
        if word.startswith("-j"):
            return word[2:].split(",")
    return []


def squeue_scopes(fake: FakeSlurm) -> list[list[str]]:
    return [asked(c) for c in fake.calls("squeue")]


def scontrol_argvs(fake: FakeSlurm) -> list[list[str]]:
    return [c.argv for c in fake.calls("scontrol")]


def show(job_id: str) -> list[str]:
    return ["-d", "-o", "show", "job", job_id]


def by_id(jobs: list[JobInfo]) -> dict[str, JobInfo]:
    return {j.job_id: j for j in jobs}


@pytest.fixture
def three(fake_slurm: FakeSlurm) -> FakeSlurm:
    """Our three jobs among other people's: two run, one waits for a GPU."""
    fake_slurm.add_job("7", "RUNNING", user="other", node="vm", start=T0, gpus=[3])
    fake_slurm.add_job("8", "PENDING", user="other", reason="Priority")
    fake_slurm.add_job("100", "RUNNING", node="vm", start=T0, gpus=[0])
    fake_slurm.add_job("101", "RUNNING", node="vm", start=T0, gpus=[1])
    fake_slurm.add_job("102", "PENDING", reason="Resources")
    fake_slurm.add_job("9", "COMPLETED", user="other", node="vm")
    return fake_slurm


def test_squeue_and_scontrol_are_scoped_to_the_callers_jobs(three: FakeSlurm) -> None:
    jobs = by_id(query_jobs(["100", "101", "102"]))
    assert list(jobs) == ["100", "101", "102"]
    assert (jobs["100"].gpu_indices, jobs["101"].gpu_indices) == ([0], [1])
    assert jobs["102"].reason == "Resources" and not jobs["102"].gpu_indices
    (squeue,) = three.calls("squeue")
    assert asked(squeue) == ["100", "101", "102"]
    assert squeue.value("-t") == "all"  # finished jobs the controller still remembers
    # one scontrol per running job of ours, none for the pending one or anyone else's
    assert sorted(scontrol_argvs(three)) == [show("100"), show("101")]
    assert three.calls("sacct") == []


def test_unscoped_status_asks_scontrol_about_a_few_running_jobs_one_by_one(
    three: FakeSlurm,
) -> None:
    # A listing costs what the controller's whole table does (ended jobs included).
    jobs = by_id(query_jobs())
    assert set(jobs) == {"7", "8", "100", "101", "102"}  # squeue's default: live jobs
    assert jobs["7"].gpu_indices == [3]
    assert squeue_scopes(three) == [[]]
    assert sorted(scontrol_argvs(three)) == [show("100"), show("101"), show("7")]


def test_an_array_is_asked_of_scontrol_once_by_its_own_id(fake_slurm: FakeSlurm) -> None:
    fake_slurm.add_job("5_0", "RUNNING", node="vm", start=T0, gpus=[0])
    fake_slurm.add_job("5_1", "RUNNING", node="vm", start=T0, gpus=[1])
    fake_slurm.add_job("5_[2-3]", "PENDING", reason="Resources", job_id="5")
    jobs = by_id(query_jobs(["5"]))
    assert {k: (j.state, j.gpu_indices) for k, j in jobs.items()} == {
        "5_0": ("RUNNING", [0]),
        "5_1": ("RUNNING", [1]),
        "5_[2-3]": ("PENDING", []),
    }
    assert squeue_scopes(fake_slurm) == [["5"]]
    assert scontrol_argvs(fake_slurm) == [show("5")]


def test_one_forgotten_id_falls_back_to_sacct(fake_slurm: FakeSlurm) -> None:
    # squeue asked about one job the controller forgot fails: "Invalid job id specified"
    fake_slurm.add_job("3", "COMPLETED", node="vm", exit_code="0:0", controller=False)
    (job,) = query_jobs(["3"])
    assert (job.job_id, job.state) == ("3", "COMPLETED")
    assert squeue_scopes(fake_slurm) == [["3"]]
    (sacct,) = fake_slurm.calls("sacct")
    assert sacct.value("-j") == "3"
    assert fake_slurm.calls("scontrol") == []


def test_forgotten_and_unknown_ids_fall_back_to_sacct(fake_slurm: FakeSlurm) -> None:
    fake_slurm.add_job("3", "FAILED", node="vm", exit_code="1:0", controller=False)
    fake_slurm.add_job("4", "CANCELLED", controller=False)
    fake_slurm.add_job("6", "RUNNING", node="vm", start=T0, gpus=[1])
    got = [(j.job_id, j.state) for j in query_jobs(["3", "4", "6", "77"])]
    assert got == [("3", "FAILED"), ("4", "CANCELLED"), ("6", "RUNNING"), ("77", "UNKNOWN")]
    assert squeue_scopes(fake_slurm) == [["3", "4", "6", "77"]]
    assert [c.value("-j") for c in fake_slurm.calls("sacct")] == ["3,4,77"]
    # every id forgotten: squeue answers nothing (or fails for a single one); sacct knows
    fake_slurm.clear_calls()
    assert [j.state for j in query_jobs(["3", "4"])] == ["FAILED", "CANCELLED"]
    assert [j.state for j in query_jobs(["77"])] == ["UNKNOWN"]


def test_a_job_the_controller_knows_is_shown_while_slurmdbd_is_down(
    fake_slurm: FakeSlurm,
) -> None:
    # Before: `status 3 99999` failed for both ids when sacct could not reach slurmdbd.
    fake_slurm.add_job("3", "RUNNING", node="vm", start=T0, gpus=[0])
    fake_slurm.respond(
        "sacct", stderr="sacct: error: Problem talking to the database: Connection refused\n", rc=1
    )
    running, missing = query_jobs(["3", "99999"])
    assert (running.job_id, running.state, running.gpu_indices) == ("3", "RUNNING", [0])
    assert (missing.job_id, missing.state) == ("99999", "UNKNOWN")
    assert missing.reason == (
        "slurmdbd not answering (sacct: sacct: error: Problem talking to the database: "
        "Connection refused)"
    )


def test_other_squeue_failures_still_raise(fake_slurm: FakeSlurm) -> None:
    fake_slurm.respond("squeue", stderr="squeue: error: Unable to contact slurm controller\n", rc=1)
    with pytest.raises(SlurmError, match="Unable to contact"):
        query_jobs(["3"])
    assert fake_slurm.calls("sacct") == []


def test_a_running_job_that_vanished_before_scontrol_shows_no_gpus(
    fake_slurm: FakeSlurm,
) -> None:
    fake_slurm.add_job("6", "RUNNING", node="vm", start=T0, gpus=[1])
    fake_slurm.respond("scontrol", stderr="slurm_load_jobs error: Invalid job id specified\n", rc=1)
    (job,) = query_jobs(["6"])
    assert job.state == "RUNNING" and job.gpu_indices == []


def polls(ids: list[str]) -> Iterator[list[JobInfo]]:
    return watch_jobs(ids, interval=0)


def test_watcher_asks_scontrol_once_per_running_job_and_drops_finished_jobs(
    three: FakeSlurm,
) -> None:
    watch = polls(["100", "101", "102"])
    first = by_id(next(watch))
    assert (first["100"].gpu_indices, first["101"].gpu_indices) == ([0], [1])
    assert sorted(scontrol_argvs(three)) == [show("100"), show("101")]

    three.clear_calls()
    again = by_id(next(watch))  # nothing changed: squeue only, GPUs from the cache
    assert (again["100"].gpu_indices, again["101"].gpu_indices) == ([0], [1])
    assert squeue_scopes(three) == [["100", "101", "102"]] and scontrol_argvs(three) == []

    # 100 ends; 102 starts on its GPU
    three.update("100", state="COMPLETED", end=T1, exit_code="0:0")
    three.update("102", state="RUNNING", node="vm", start=T1, gpus=[0], reason="")
    three.clear_calls()
    snap = by_id(next(watch))
    assert snap["100"].state == "COMPLETED" and snap["102"].gpu_indices == [0]
    assert scontrol_argvs(three) == [show("102")]

    three.clear_calls()
    snap = by_id(next(watch))  # 100 is final: never asked again, still reported
    assert squeue_scopes(three) == [["101", "102"]]
    assert scontrol_argvs(three) == []
    assert snap["100"].state == "COMPLETED" and list(snap) == ["100", "101", "102"]

    three.update("101", state="FAILED", end=T1, exit_code="1:0")
    three.update("102", state="COMPLETED", end=T1, exit_code="0:0")
    three.clear_calls()
    final = by_id(next(watch))
    assert squeue_scopes(three) == [["101", "102"]]
    assert {k: j.state for k, j in final.items()} == {
        "100": "COMPLETED",
        "101": "FAILED",
        "102": "COMPLETED",
    }
    with pytest.raises(StopIteration):
        next(watch)
    # squeue has no exit codes: one sacct call for the jobs that just ended
    assert [c.value("-j") for c in three.calls("sacct")] == ["101,102"]
    assert final["101"].exit_code == "1:0"


def test_watcher_asks_again_after_a_requeue(fake_slurm: FakeSlurm) -> None:
    fake_slurm.add_job("100", "RUNNING", node="vm", start=T0, gpus=[0])
    watch = polls(["100"])
    assert next(watch)[0].gpu_indices == [0]
    # requeued (node failure): pending again, then running elsewhere with a new start
    fake_slurm.update("100", state="PENDING", node="", start="", reason="BeginTime")
    assert next(watch)[0].gpu_indices == []
    fake_slurm.update("100", state="RUNNING", node="vm", start=T1, gpus=[1], reason="")
    assert next(watch)[0].gpu_indices == [1]
    assert scontrol_argvs(fake_slurm) == [show("100"), show("100")]


def test_watcher_follows_an_array_until_every_task_ended(fake_slurm: FakeSlurm) -> None:
    fake_slurm.add_job("100", "RUNNING", node="vm", start=T0, gpus=[0])
    fake_slurm.add_job("5_0", "RUNNING", node="vm", start=T0, gpus=[1])
    fake_slurm.add_job("5_1", "PENDING", reason="Resources")
    watch = polls(["5", "100"])
    first = next(watch)
    assert [(j.job_id, j.array_job_id) for j in first] == [("5_0", "5"), ("5_1", "5"), ("100", "")]
    fake_slurm.update("5_0", state="COMPLETED", end=T1)  # the array is not done yet
    fake_slurm.update("100", state="COMPLETED", end=T1)
    next(watch)
    fake_slurm.clear_calls()
    fake_slurm.update("5_1", state="RUNNING", node="vm", start=T1, gpus=[1])
    snap = next(watch)
    assert squeue_scopes(fake_slurm) == [["5"]]
    assert [j.state for j in snap] == ["COMPLETED", "RUNNING", "COMPLETED"]
    fake_slurm.update("5_1", state="FAILED", end=T1)
    assert [j.state for j in next(watch)] == ["COMPLETED", "FAILED", "COMPLETED"]
    with pytest.raises(StopIteration):
        next(watch)


def test_many_running_jobs_are_asked_of_scontrol_each_never_all(
    fake_slurm: FakeSlurm,
) -> None:
    ids = [str(i) for i in range(100, 110)]
    for n, jid in enumerate(ids):
        fake_slurm.add_job(jid, "RUNNING", node="vm", start=T0, gpus=[n])
    assert [j.gpu_indices for j in query_jobs(ids)] == [[n] for n in range(10)]
    assert sorted(scontrol_argvs(fake_slurm)) == [show(i) for i in ids]


def test_scontrol_calls_overlap_but_only_a_few_at_once(
    fake_slurm: FakeSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    from acbslurm.slurm import jobs as jobs_mod

    ids = [str(i) for i in range(100, 110)]
    for jid in ids:
        fake_slurm.add_job(jid, "RUNNING", node="vm", start=T0, gpus=[0])
    lock = threading.Lock()
    running, peak = 0, 0

    def show_job(job_id: str, env: object) -> str:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.05)
        with lock:
            running -= 1
        return f"JobId={job_id} Nodes=vm GRES=gpu:1(IDX:0)\n"

    monkeypatch.setattr(jobs_mod, "_show_job", show_job)
    assert all(j.gpu_indices == [0] for j in query_jobs(ids))
    assert 1 < peak <= jobs_mod._SCONTROL_PARALLEL


def test_watching_no_jobs_asks_nothing(fake_slurm: FakeSlurm) -> None:
    assert list(watch_jobs([], interval=0)) == [[]]
    assert fake_slurm.calls() == []


def test_submit_wait_of_three_jobs_asks_about_them_alone(fake_slurm: FakeSlurm) -> None:
    from click.testing import CliRunner

    from acbslurm.cli.jobs import submit

    fake_slurm.add_job("7", "RUNNING", user="other", node="vm", start=T0, gpus=[3])
    run = {"state": "RUNNING", "node": "vm", "start": T1, "reason": ""}
    fake_slurm.set_defaults(
        reason="Priority", next=[{**run, "gpus": [0]}, {}, {"state": "COMPLETED", "end": T1}]
    )
    spec = str(Path(__file__).resolve().parents[3] / "conf" / "examples" / "sandbox-gpu.yaml")
    args = [spec, "-n", "3", "--wait", "--interval", "0.1", "--json", "--acbslurm", "/x/acbslurm"]
    args.append("--no-check")  # the checks' calls are tested in tests/unit/cli
    res = CliRunner().invoke(submit, [*args, "--set", "container=", "--set", "command=['true']"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["job_ids"] == ["100", "101", "102"]
    assert [(j["job_id"], j["state"]) for j in out["jobs"]] == [
        ("100", "COMPLETED"),
        ("101", "COMPLETED"),
        ("102", "COMPLETED"),
    ]
    squeue = ["squeue", "-a", "-h", "-O", SQUEUE_FORMAT, "-t", "all", "--jobs=100,101,102"]
    polls = [a for a in fake_slurm.argvs() if a[0] != "sbatch"]
    # poll 1: pending; 2: running, scontrol once per job; 3: running, GPUs cached; 4: done
    assert polls[:2] == [squeue, squeue]
    assert sorted(polls[2:5]) == [
        ["scontrol", "-d", "-o", "show", "job", i] for i in out["job_ids"]
    ]
    sacct = [c for c in polls[5:] if c[0] == "sacct"]
    assert [c for c in polls[5:] if c[0] != "sacct"] == [squeue, squeue]
    assert len(sacct) == 1 and "100,101,102" in sacct[0]  # the exit codes of ended jobs
    assert [j["gpu_indices"] for j in out["jobs"]] == [[], [], []]  # ended: none held
