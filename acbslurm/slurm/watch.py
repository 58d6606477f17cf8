"""Follow jobs until they end with one batched query per poll."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence

from acbslurm.slurm.jobs import JobInfo, query_jobs


def watch_jobs(
    job_ids: Sequence[str],
    *,
    interval: float = 1.0,
    timeout: float | None = None,
    record_dir: str = "",
    query: Callable[..., list[JobInfo]] = query_jobs,
) -> Iterator[list[JobInfo]]:
    """Yield a snapshot of all ``job_ids`` each poll until every one has finished.

    Raises TimeoutError when ``timeout`` seconds pass first.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        snapshot = query(list(job_ids), record_dir=record_dir)
        yield snapshot
        if all(j.finished for j in snapshot):
            return
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(f"jobs still not finished after {timeout:g} s")
        time.sleep(interval)


def describe(job: JobInfo) -> str:
    """One line for a job's current state (used for --wait progress)."""
    text = f"{job.job_id} {job.state}"
    if job.state == "PENDING" and job.reason:
        text += f" ({job.reason})"
    if job.node:
        text += f" on {job.node}"
    if job.gpu_indices:
        text += " GPU " + ",".join(str(i) for i in job.gpu_indices)
    if job.gpu_uuids:
        text += " [" + ",".join(job.gpu_uuids) + "]"
    if job.finished and job.exit_code:
        text += f" exit {job.exit_code}"
    return text
