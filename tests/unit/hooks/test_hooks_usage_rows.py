"""The sender's reading of sacct before it writes a job's record: the job's own row."""

from __future__ import annotations

from acbslurm.hooks.usage import Row, _own_fields

HEAD = "JobIDRaw,JobID,State,End,ElapsedRaw,AllocTRES,NNodes,SystemComment"


def test_the_row_of_the_jobs_own_id_is_read_not_another_tasks() -> None:
    """``sacct -j 40`` of the id an array's last task keeps lists every task: the
    row read is task 40's, never the last one printed (another task's comment)."""
    out = (
        "40|39_1|COMPLETED|2026-12-06T05:00:00|30|cpu=1,gres/gpu=1|1|mine\n"
        "41|41|COMPLETED|2026-12-06T05:00:09|90|cpu=1,gres/gpu=4|2|other|with a bar\n"
    )
    assert _own_fields(out, "40") == [
        "39_1",
        "COMPLETED",
        "2026-12-06T05:00:00",
        "30",
        "cpu=1,gres/gpu=1",
        "1",
        "mine",
    ]
    row = Row(_own_fields(out, "41") or [])
    assert (row.job_ref, row.elapsed, row.nodes, row.system_comment) == (
        "41",
        90,
        2,
        "other|with a bar",
    )
    assert row.ended
    assert _own_fields(out, "42") is None


def test_an_array_task_is_named_as_array_task_to_sacctmgr() -> None:
    # Task 3 of array 50 that kept the array's id: its raw id would name every task.
    row = Row(_own_fields("50|50_3|COMPLETED|t|1|a|1|\n", "50") or [])
    assert row.job_ref == "50_3"


def test_a_running_or_unended_job_is_not_ended() -> None:
    assert not Row(_own_fields("40|40|RUNNING|Unknown|3|cpu=1|1|x\n", "40") or []).ended
    assert not Row(_own_fields("40|40|COMPLETED||3|cpu=1|1|x\n", "40") or []).ended
    # A requeued job: the newest run's row.
    got = _own_fields("40|40|REQUEUED|t1|3|a|1|\n40|40|COMPLETED|t2|5|b|1|c\n", "40")
    assert got == ["40", "COMPLETED", "t2", "5", "b", "1", "c"]
