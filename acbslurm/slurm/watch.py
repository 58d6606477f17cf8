"""Follow jobs until they end, asking Slurm only about what can still change."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence

from acbslurm.slurm.jobs import GpuCache, query_jobs
from acbslurm.slurm.jobtypes import JobInfo


class JobWatcher:
    """The state of a fixed set of jobs, polled with one scoped query per poll.

    As submitit's watcher does, a job that reached a final state keeps its last rows
    and is never asked about again: each poll queries only the unfinished ids (squeue
    scoped to them, sacct for the ones the controller forgot), and scontrol is asked
    once per running job for its GPUs (``GpuCache``). An array's id is final once all
    its task rows are.
    """

    def __init__(
        self,
        job_ids: Sequence[str],
        *,
        record_dir: str = "",
        env: Mapping[str, str] | None = None,
        query: Callable[..., list[JobInfo]] = query_jobs,
    ) -> None:
        self.job_ids = list(dict.fromkeys(job_ids))
        self._record_dir = record_dir
        self._env = env
        self._query = query
        self._final: dict[str, list[JobInfo]] = {}
        self._gpus: GpuCache = {}

    @property
    def done(self) -> bool:
        """Every job has reached a final state."""
        return len(self._final) == len(self.job_ids)

    # complexity: eight lines; the count is the comprehensions' clauses, not branches a reader
    # follows.
    def poll(self) -> list[JobInfo]:
        """One snapshot of every job, in the order of ``job_ids``."""
        ask = [i for i in self.job_ids if i not in self._final]
        rows = self._rows(ask)
        for i in ask:  # the rows of an id whose jobs all finished become its final ones
            if rows[i] and all(j.finished for j in rows[i]):
                self._final[i] = rows.pop(i)
        snapshot = [job for i in self.job_ids for job in self._final.get(i) or rows.pop(i)]
        # Rows under an id nobody asked for (a custom query) are shown, not dropped.
        return snapshot + [job for extra in rows.values() for job in extra]

    def _rows(self, ask: list[str]) -> dict[str, list[JobInfo]]:
        """The query's rows of the ``ask`` ids, by the id they were asked by."""
        rows: dict[str, list[JobInfo]] = {i: [] for i in ask}
        if ask:
            fresh = self._query(
                ask, record_dir=self._record_dir, env=self._env, gpu_cache=self._gpus
            )
            for job in fresh:
                # query_jobs labels an array's task rows with the id they were asked by
                rows.setdefault(job.array_job_id or job.job_id, []).append(job)
        return rows


def watch_jobs(
    job_ids: Sequence[str],
    *,
    interval: float = 1.0,
    timeout: float | None = None,
    record_dir: str = "",
    env: Mapping[str, str] | None = None,
    query: Callable[..., list[JobInfo]] = query_jobs,
) -> Iterator[list[JobInfo]]:
    """Yield a snapshot of all ``job_ids`` each poll until every one has finished.

    ``query`` is called as ``query_jobs`` is, with ``gpu_cache`` (see ``JobWatcher``).
    Raises TimeoutError when ``timeout`` seconds pass first.
    """
    watcher = JobWatcher(job_ids, record_dir=record_dir, env=env, query=query)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        yield watcher.poll()
        if watcher.done:
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
