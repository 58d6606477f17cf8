"""Totals per user, account, partition or day, built one job at a time (flat memory)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, datetime, timedelta

from acbslurm.accounting.gpuseconds import JobUsage
from acbslurm.values import mutable

GROUP_KEYS = ("user", "account", "partition", "day")


@mutable
class Group:
    key: str
    jobs: int = 0
    running: int = 0
    gpu_seconds: int = 0
    wait_sum: int = 0
    waited: int = 0

    @property
    def mean_wait(self) -> float | None:
        return self.wait_sum / self.waited if self.waited else None


def _day(ts: int) -> date:
    return datetime.fromtimestamp(ts).date()


def split_by_day(job: JobUsage, definition: str) -> Iterator[tuple[str, int]]:
    """(YYYY-MM-DD, GPU-seconds) pieces of one job.

    sreport's figures are wall time, so they are split at local midnights exactly;
    sacct's (suspension subtracted, not clipped) go whole to the day the job started,
    or to its submit day if it never started.
    """
    if definition != "sreport" or job.gpu_seconds == 0 or job.span_end <= job.span_start:
        anchor = job.start or job.submit
        yield _day(anchor).isoformat(), job.gpu_seconds
        return
    t = job.span_start
    while t < job.span_end:
        d = _day(t)
        midnight = datetime.combine(d + timedelta(days=1), datetime.min.time()).timestamp()
        stop = min(int(midnight), job.span_end)
        yield d.isoformat(), job.gpus * (stop - t)
        t = stop


@mutable
class LeftOut:
    """Earlier runs of requeued or preempted jobs that sacct's definition leaves out
    (it counts a job's newest run only), and their GPU-seconds; known when the report
    read the window's jobs one by one (``counted``), not when MariaDB summed groups."""

    runs: int = 0
    gpu_seconds: int = 0
    counted: bool = False


class Aggregator:
    """Running totals, and per-group totals when ``by`` names a grouping."""

    def __init__(self, by: str, definition: str) -> None:
        self.by = by
        self.definition = definition
        self.total = Group("total")
        self.groups: dict[str, Group] = {}
        self.left_out = LeftOut()

    def _group(self, key: str) -> Group:
        g = self.groups.get(key)
        if g is None:
            g = self.groups[key] = Group(key)
        return g

    @staticmethod
    def _count(g: Group, job: JobUsage, seconds: int) -> None:
        g.jobs += 1
        g.running += job.running
        g.gpu_seconds += seconds
        if job.wait is not None:
            g.wait_sum += job.wait
            g.waited += 1

    def add(self, job: JobUsage) -> None:
        self._count(self.total, job, job.gpu_seconds)
        if self.by == "job":
            return
        if self.by == "day":
            for key, seconds in split_by_day(job, self.definition):
                self._count(self._group(key), job, seconds)
            return
        key = {"user": job.user, "account": job.account, "partition": job.partition}[self.by]
        self._count(self._group(key), job, job.gpu_seconds)

    def sorted_groups(self) -> list[Group]:
        if self.by == "day":
            return sorted(self.groups.values(), key=lambda g: g.key)
        return sorted(self.groups.values(), key=lambda g: (-g.gpu_seconds, g.key))

    def share(self, g: Group) -> float:
        return g.gpu_seconds / self.total.gpu_seconds if self.total.gpu_seconds else 0.0
