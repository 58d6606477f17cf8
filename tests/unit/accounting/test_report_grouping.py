"""Grouping math: shares, mean wait and per-day splitting."""

from __future__ import annotations

from datetime import datetime

from acbslurm.accounting.gpuseconds import JobUsage
from acbslurm.accounting.grouping import Aggregator, split_by_day


def job(
    user: str, gpus: int, start: int, end: int, wait: int | None = 10, **kw: object
) -> JobUsage:
    base: dict[str, object] = dict(
        job_id="1",
        job_id_raw=1,
        job_db_inx=1,
        uid=1,
        user=user,
        account="a-" + user,
        partition="p1",
        state="COMPLETED",
        running=False,
        gpus=gpus,
        submit=start - (wait or 0),
        start=start,
        end=end,
        wait=wait,
        elapsed=end - start,
        gpu_seconds=gpus * (end - start),
        span_start=start,
        span_end=end,
    )
    base.update(kw)
    return JobUsage(**base)  # type: ignore[arg-type]


def test_user_groups_shares_and_wait() -> None:
    agg = Aggregator("user", "sacct")
    agg.add(job("a", 1, 1000, 1100, wait=10))
    agg.add(job("a", 2, 1000, 1100, wait=30))
    agg.add(job("b", 1, 1000, 1300, wait=None))
    groups = agg.sorted_groups()
    assert [g.key for g in groups] == ["a", "b"]
    a, b = groups
    assert a.gpu_seconds == 300 and a.jobs == 2 and a.mean_wait == 20
    assert b.gpu_seconds == 300 and b.mean_wait is None
    assert agg.total.gpu_seconds == 600
    assert abs(agg.share(a) + agg.share(b) - 1.0) < 1e-12
    assert agg.share(a) == 0.5


def test_job_mode_keeps_only_totals() -> None:
    agg = Aggregator("job", "sacct")
    agg.add(job("a", 1, 0, 50))
    assert agg.groups == {}
    assert agg.total.jobs == 1


def test_sreport_day_split_is_exact_across_midnight() -> None:
    midnight = int(datetime(2026, 3, 10).timestamp())
    j = job("a", 2, midnight - 3600, midnight + 7200)
    parts = dict(split_by_day(j, "sreport"))
    assert parts == {"2026-03-09": 2 * 3600, "2026-03-10": 2 * 7200}
    assert sum(parts.values()) == j.gpu_seconds


def test_sacct_day_goes_to_start_day() -> None:
    midnight = int(datetime(2026, 3, 10).timestamp())
    j = job("a", 2, midnight - 3600, midnight + 7200)
    assert list(split_by_day(j, "sacct")) == [("2026-03-09", j.gpu_seconds)]


def test_day_groups_sum_to_total() -> None:
    agg = Aggregator("day", "sreport")
    base = int(datetime(2026, 1, 1).timestamp())
    for k in range(20):
        agg.add(job("u", 1 + k % 3, base + k * 40_000, base + k * 40_000 + 90_000))
    assert sum(g.gpu_seconds for g in agg.groups.values()) == agg.total.gpu_seconds
    keys = [g.key for g in agg.sorted_groups()]
    assert keys == sorted(keys)
