"""sacct's definition counts a job's newest run only: the earlier runs of a requeued or
preempted job it drops are counted and said (the table's `# left out:` line, JSON's
totals), never left out silently."""

from __future__ import annotations

from acbslurm.accounting.gpuseconds import JobRow, newest_rows
from acbslurm.accounting.grouping import Aggregator
from acbslurm.accounting.output import left_out_note, totals_record
from acbslurm.accounting.report import _counter

GPU = 1001  # the gres/gpu TRES id


def row(inx: int, job: int, submit: int, start: int, end: int, gpus: int = 2) -> JobRow:
    return JobRow(
        inx, job, 0, 0, None, 1001, "a", "p1", 3, submit, submit, start, end, 0,
        f"1=2,{GPU}={gpus}", "user1",
    )  # fmt: skip


def test_dropped_runs_are_counted_with_their_gpu_seconds() -> None:
    agg = Aggregator("job", "sacct")
    count = _counter(agg.left_out, GPU, now=10_000)
    rows = [
        row(3, 7, 500, 600, 700),  # job 7's newest run
        row(2, 7, 100, 200, 300),  # its earlier run: 2 GPUs x 100 s
        row(4, 8, 100, 200, 250),
    ]
    kept = list(newest_rows(rows, count))
    assert [r.job_db_inx for r in kept] == [3, 4]
    rec = totals_record(agg)
    assert (rec["left_out_runs"], rec["left_out_gpu_seconds"]) == (1, 200)
    assert left_out_note(agg).startswith("left out: 1 earlier run(s) of requeued")


def test_summed_groups_say_what_they_leave_out_without_a_number() -> None:
    agg = Aggregator("user", "sacct")
    rec = totals_record(agg)
    assert rec["left_out_runs"] is None and "--by job shows how much" in left_out_note(agg)
    assert left_out_note(Aggregator("user", "sreport")) == ""
