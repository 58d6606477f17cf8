"""The epilog's reading of sacct before it writes a pool's usage: the job's own row."""

from __future__ import annotations

from acbslurm.hooks.usage import _ended_fields


def test_the_row_of_the_jobs_own_id_is_read_not_another_tasks() -> None:
    """``sacct -j 40`` of the id an array's last task keeps lists every task: the
    row read is task 40's, never the last one printed (another task's comment)."""
    out = (
        "40|COMPLETED|2026-12-06T05:00:00|30|cpu=1,gres/gpu=1|mine\n"
        "41|COMPLETED|2026-12-06T05:00:09|90|cpu=1,gres/gpu=4|other|with a bar\n"
    )
    assert _ended_fields(out, "40") == [
        "COMPLETED",
        "2026-12-06T05:00:00",
        "30",
        "cpu=1,gres/gpu=1",
        "mine",
    ]
    assert _ended_fields(out, "41") == [
        "COMPLETED",
        "2026-12-06T05:00:09",
        "90",
        "cpu=1,gres/gpu=4",
        "other|with a bar",
    ]
    assert _ended_fields(out, "42") is None


def test_a_running_or_unended_job_is_not_read() -> None:
    assert _ended_fields("40|RUNNING|Unknown|3|cpu=1|x\n", "40") is None
    assert _ended_fields("40|COMPLETED||3|cpu=1|x\n", "40") is None
    # A requeued job: the newest run's row.
    assert _ended_fields("40|REQUEUED|t1|3|a|\n40|COMPLETED|t2|5|b|c\n", "40") == [
        "COMPLETED",
        "t2",
        "5",
        "b",
        "c",
    ]
