"""What `status` shows of a finished job's reason, of array tasks' order, and of a task
that ends between squeue and scontrol."""

from __future__ import annotations

from fake_slurm import FakeSlurm

from acbslurm.slurm.jobs import query_jobs

T0 = "2026-11-30T01:00:00"


def test_a_requeued_job_that_completed_shows_no_stale_pending_reason(
    fake_slurm: FakeSlurm,
) -> None:
    # squeue (and sacct) keep the BeginTime a requeue gave the job.
    fake_slurm.add_job("9", "COMPLETED", reason="BeginTime", node="vm", start=T0, end=T0)
    fake_slurm.add_job("10", "FAILED", reason="NonZeroExitCode", node="vm", start=T0)
    fake_slurm.add_job("11", "CANCELLED", reason="Dependency")  # never started
    fake_slurm.add_job("12", "TIMEOUT", reason="JobHeldUser", node="vm", start=T0)
    fake_slurm.add_job("13", "COMPLETED", reason="Prolog", node="vm", start=T0)  # seen too
    jobs = {j.job_id: j for j in query_jobs(["9", "10", "11", "12", "13"])}
    assert jobs["13"].reason == ""
    assert jobs["9"].reason == "" and jobs["9"].as_json()["reason"] is None
    assert jobs["10"].reason == "NonZeroExitCode"  # about its end: kept
    assert jobs["11"].reason == "Dependency"  # why it never ran: kept
    assert jobs["12"].reason == ""  # it started after that wait
    fake_slurm.forget("9")  # sacct alone says the same
    (gone,) = query_jobs(["9"])
    assert gone.state == "COMPLETED" and gone.reason == ""


def test_a_pending_job_keeps_its_reason(fake_slurm: FakeSlurm) -> None:
    fake_slurm.add_job("9", "PENDING", reason="BeginTime")
    assert query_jobs(["9"])[0].reason == "BeginTime"
    assert query_jobs()[0].reason == "BeginTime"


def test_status_and_status_of_the_array_list_tasks_in_one_order(fake_slurm: FakeSlurm) -> None:
    # squeue's own order (partition, state, priority) is not the tasks' order.
    fake_slurm.add_job("5_[11-12]", "PENDING", reason="Resources", job_id="5")
    fake_slurm.add_job("7", "RUNNING", node="vm", start=T0, gpus=[3])
    fake_slurm.add_job("5_10", "RUNNING", node="vm", start=T0, gpus=[0])
    fake_slurm.add_job("5_2", "RUNNING", node="vm", start=T0, gpus=[1])
    fake_slurm.add_job("4", "PENDING", reason="Priority")
    every = [j.job_id for j in query_jobs()]
    assert every == ["4", "5_2", "5_10", "5_[11-12]", "7"]
    assert [j.job_id for j in query_jobs(["5"])] == ["5_2", "5_10", "5_[11-12]"]


def test_a_task_that_ends_between_squeue_and_scontrol_is_not_running_without_gpus(
    fake_slurm: FakeSlurm,
) -> None:
    # Seen on the sandbox: squeue says 17_1 RUNNING, scontrol (asked just after) says
    # JobState=COMPLETING with GRES= (the GPUs released): `gpu_indices: []`.
    ending = {"state": "COMPLETING", "gpus": []}
    fake_slurm.add_job("5_0", "RUNNING", node="vm", start=T0, gpus=[0])
    fake_slurm.add_job("5_1", "RUNNING", node="vm", start=T0, gpus=[1], next=[ending])
    fake_slurm.add_job("5_[2-3]", "PENDING", reason="Resources", job_id="5")
    for ids in (["5"], []):
        fake_slurm.update("5_1", state="RUNNING", gpus=[1], next=[ending])
        jobs = {j.job_id: j for j in query_jobs(ids)}
        assert (jobs["5_0"].state, jobs["5_0"].gpu_indices) == ("RUNNING", [0]), ids
        assert (jobs["5_1"].state, jobs["5_1"].gpu_indices) == ("COMPLETING", []), ids
    # ended outright between the two calls: COMPLETING too, its end comes next time
    fake_slurm.update("5_1", state="RUNNING", gpus=[1], next=[{"state": "COMPLETED"}])
    (task,) = [j for j in query_jobs(["5_1"]) if j.job_id == "5_1"]
    assert task.state == "COMPLETING" and not task.finished
