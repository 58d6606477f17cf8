"""Two jobs on one GPU at the same time: a data error, shown, never drawn silently.

Slurm never gives one GPU to two jobs at once, so when the devices kept in the jobs'
AdminComments (slurm/gpu_history.py) say it did, those devices are wrong: before the
prolog named array tasks ``ARRAYJOB_TASK``, an array's last task wrote its GPUs into
every task's comment. ``report`` (text and JSON) and the timeline count such overlaps
and name the jobs.

Jobs arrive in the report's order (by job id), roughly by start. Each GPU keeps its
intervals sorted by start and the longest one seen, so a new job is compared only with
those that start within that length before it: no quadratic scan on a big window.
"""

from __future__ import annotations

import bisect

from acbslurm.accounting.gpuseconds import JobUsage
from acbslurm.units import iso
from acbslurm.values import field, frozen, mutable


@frozen
class Overlap:
    device: str  # node:index=uuid, as kept in the AdminComment
    first: str  # the job listed first
    second: str  # the job found to overlap it
    start: int  # the shared interval
    end: int

    def record(self) -> dict[str, object]:
        where, _, uuid = self.device.partition("=")
        node, _, index = where.rpartition(":")
        return {
            "node": node,
            "index": int(index) if index.isascii() and index.isdigit() else None,
            "uuid": uuid,
            "job_ids": [self.first, self.second],
            "start": iso(self.start),
            "end": iso(self.end),
        }

    def text(self) -> str:
        where = self.device.partition("=")[0]
        return (
            f"jobs {self.first} and {self.second} both on {where} "
            f"({self.device.partition('=')[2]}) from {iso(self.start)} to {iso(self.end)}"
        )


@mutable
class _Device:
    """One GPU's intervals in (start, end, job) order, as two lists at the same
    positions: bisecting plain starts costs a third of bisecting tuples."""

    starts: list[int] = field(default_factory=list)
    spans: list[tuple[int, str]] = field(default_factory=list)  # (end, job)
    longest: int = 0

    def insert(self, start: int, end: int, job: str) -> None:
        i = bisect.bisect_left(self.starts, start)
        while i < len(self.starts) and self.starts[i] == start and self.spans[i] < (end, job):
            i += 1
        self.starts.insert(i, start)
        self.spans.insert(i, (end, job))
        self.longest = max(self.longest, end - start)


class OverlapCheck:
    """Feed every job (``add``); ``found`` holds the overlaps seen so far."""

    def __init__(self, now: int) -> None:
        self.now = now
        self.found: list[Overlap] = []
        self._devices: dict[str, _Device] = {}

    def add(self, job: JobUsage) -> list[Overlap]:
        """The overlaps of ``job`` with jobs added before it (also kept in ``found``)."""
        if not job.start or not job.gpu_devices:
            return []
        end = job.end or self.now
        new: list[Overlap] = []
        for item in filter(None, job.gpu_devices.split(",")):
            key = item.partition("=")[2] or item  # the GPU (its UUID), whatever its index
            dev = self._devices.setdefault(key, _Device())
            new += self._check(dev, item, job.start, end, job.job_id)
            dev.insert(job.start, end, job.job_id)
        self.found += new
        return new

    @staticmethod
    def _check(dev: _Device, item: str, start: int, end: int, job_id: str) -> list[Overlap]:
        out = []
        i = bisect.bisect_left(dev.starts, end)
        while i > 0:
            i -= 1
            s2 = dev.starts[i]
            e2, other = dev.spans[i]
            if s2 + dev.longest <= start:
                break  # this one and every earlier one ended by ``start``
            if e2 > start and s2 < end and other != job_id:
                out.append(Overlap(item, other, job_id, max(start, s2), min(end, e2)))
        return out

    def jobs(self) -> set[str]:
        """Every job id in an overlap."""
        return {j for o in self.found for j in (o.first, o.second)}
