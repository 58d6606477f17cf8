"""GPU-seconds under both definitions, sacct's de-duplication and job id display."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from acbslurm.accounting.gpuseconds import (
    ARRAY_META_TASK,
    JobRow,
    compute,
    display_id,
    newest_rows,
    sacct_elapsed,
    sreport_elapsed,
)
from acbslurm.accounting.tres import tres_count, tres_value
from acbslurm.slurm.states import JOB_REQUEUE, JOB_RESIZING, normalize_state, state_name

NOW = 1_800_000_000


def row(**kw: object) -> JobRow:
    base: dict[str, object] = dict(
        job_db_inx=1,
        id_job=100,
        id_array_job=0,
        id_array_task=4294967294,
        array_task_str=None,
        id_user=1001,
        account="acct",
        partition="p1",
        state=3,
        time_submit=NOW - 1000,
        time_eligible=NOW - 1000,
        time_start=NOW - 900,
        time_end=NOW - 100,
        time_suspended=0,
        tres_alloc="1=2,2=2048,4=1,5=2,1001=2",
        assoc_user="user1",
    )
    base.update(kw)
    return JobRow(**base)  # type: ignore[arg-type]


def test_completed_job_is_gpus_times_elapsed() -> None:
    job = compute(row(), 1001, "sacct", NOW - 5000, NOW, NOW, "user1")
    assert job.gpus == 2
    assert job.elapsed == 800
    assert job.gpu_seconds == 1600
    assert job.wait == 100
    assert not job.running
    assert job.state == "COMPLETED"


def test_running_job_counts_to_now_and_is_marked() -> None:
    job = compute(row(state=1, time_end=0), 1001, "sacct", NOW - 5000, NOW, NOW, "u")
    assert job.running
    assert job.elapsed == 900
    assert job.gpu_seconds == 1800


def test_suspended_time_subtracted_by_sacct_not_by_sreport() -> None:
    r = row(time_suspended=300)
    assert sacct_elapsed(r, NOW)[0] == 500
    assert sreport_elapsed(r, 0, NOW, NOW)[0] == 800


def test_currently_suspended_job_holds_suspend_moment() -> None:
    # While SUSPENDED, time_suspended is when the suspension began (running offset).
    r = row(state=2, time_end=0, time_suspended=NOW - 200)
    assert sacct_elapsed(r, NOW)[0] == 900 - 200


def test_never_started_jobs_count_zero() -> None:
    pending = row(state=0, time_start=0, time_end=0, tres_alloc="")
    cancelled = row(state=4, time_start=0, time_end=NOW - 50, tres_alloc="")
    for r in (pending, cancelled):
        for d in ("sacct", "sreport"):
            job = compute(r, 1001, d, 0, NOW, NOW, "u")
            assert job.gpu_seconds == 0
            assert job.wait is None
            assert not job.running


def test_start_after_end_is_zero_like_slurmdbd() -> None:
    assert sacct_elapsed(row(time_start=NOW - 10, time_end=NOW - 20), NOW)[0] == 0


def test_elapsed_never_negative() -> None:
    assert sacct_elapsed(row(time_suspended=10_000), NOW)[0] == 0


def test_sreport_clips_to_window() -> None:
    r = row(time_start=NOW - 900, time_end=NOW - 100)
    assert sreport_elapsed(r, NOW - 500, NOW - 200, NOW)[0] == 300
    assert sreport_elapsed(r, NOW - 50, NOW, NOW)[0] == 0
    job = compute(r, 1001, "sreport", NOW - 500, NOW - 200, NOW, "u")
    assert job.gpu_seconds == 600
    # sacct does not clip: the window only selects.
    assert compute(r, 1001, "sacct", NOW - 500, NOW - 200, NOW, "u").gpu_seconds == 1600


def test_newest_row_per_job_keeps_resized_rows() -> None:
    rows = [
        row(id_job=5, time_submit=300, job_db_inx=3),
        row(id_job=5, time_submit=200, state=JOB_REQUEUE, job_db_inx=2),
        row(id_job=5, time_submit=100, state=JOB_RESIZING, job_db_inx=1),
        row(id_job=6, time_submit=50, job_db_inx=4),
    ]
    assert [r.job_db_inx for r in newest_rows(rows)] == [3, 1, 4]


def test_display_id_for_arrays() -> None:
    assert display_id(row()) == "100"
    assert display_id(row(id_job=107, id_array_job=100, id_array_task=3)) == "100_3"
    meta = row(id_array_job=100, id_array_task=ARRAY_META_TASK, array_task_str="4-9")
    assert display_id(meta) == "100_[4-9]"


def test_tres_parsing() -> None:
    assert tres_count("1=2,2=2048,4=1,5=2,1001=2", 1001) == 2
    assert tres_count("1=2,10010=7", 1001) == 0
    assert tres_count("", 1001) == 0
    assert tres_count(None, 1001) == 0
    assert tres_count("1=2", None) == 0
    assert tres_value("1002=87.5,1003=1024", 1002) == 87.5
    assert tres_value("1002=87.5", 1003) is None


def test_state_names() -> None:
    assert state_name(3) == "COMPLETED"
    assert state_name(JOB_REQUEUE) == "REQUEUED"
    assert state_name(JOB_RESIZING) == "RESIZING"
    assert normalize_state("cd") == "COMPLETED"
    assert normalize_state("cancelled") == "CANCELLED"


@given(
    start=st.integers(1, NOW),
    dur=st.integers(0, 10**7),
    susp=st.integers(0, 10**6),
    ws=st.integers(0, NOW + 10**7),
    wl=st.integers(1, 10**8),
)
def test_sreport_never_exceeds_window_or_run(
    start: int, dur: int, susp: int, ws: int, wl: int
) -> None:
    end = start + dur
    r = row(time_start=start, time_end=end, time_suspended=susp)
    now = max(end, ws + wl)
    sec = sreport_elapsed(r, ws, ws + wl, now)[0]
    assert 0 <= sec <= min(wl, dur)
    assert 0 <= sacct_elapsed(r, now)[0] <= dur
