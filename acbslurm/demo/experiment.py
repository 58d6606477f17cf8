"""The GPU-queue experiment: 1, 2, then 4 one-GPU jobs on a 2-GPU node, and what Slurm did.

Each phase submits its jobs, follows them with ``watch_jobs`` (one query per poll,
scoped to the jobs not finished yet), and keeps for every job: the pending reasons
seen, when it was submitted/started/ended (Slurm's times), and its GPU (index from
Slurm, UUID from the job record or the inventory).
``check_phase`` says what did not behave as a GPU server under Slurm should.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from acbslurm.slurm.jobs import submit_script
from acbslurm.slurm.jobtypes import JobInfo
from acbslurm.slurm.watch import watch_jobs
from acbslurm.values import field, mutable


@mutable
class JobTrace:
    job_id: str
    hold: float
    reasons: list[str] = field(default_factory=list)
    state: str = ""
    submit: str = ""
    start: str = ""
    end: str = ""
    gpu_indices: list[int] = field(default_factory=list)
    gpu_uuids: list[str] = field(default_factory=list)
    uuid_source: str = ""

    # complexity: one field per line, each `or` or `if` that field's rule (keep what Slurm said only
    # once); a helper per field would move the rule out of sight.
    def update(self, info: JobInfo) -> None:
        """Take what a new snapshot of the job says; keep what Slurm said only once."""
        self.state = info.state
        self.submit = info.submit_time or self.submit
        self.start = info.start_time or self.start
        self.end = info.end_time or self.end
        # A pending reason not seen before, in the order Slurm gave them.
        if info.state == "PENDING" and info.reason and info.reason not in self.reasons:
            self.reasons.append(info.reason)
        if info.gpu_indices and not self.gpu_indices:
            self.gpu_indices = list(info.gpu_indices)
        if info.gpu_uuids and not self.gpu_uuids:
            self.gpu_uuids, self.uuid_source = list(info.gpu_uuids), "job record"

    @property
    def waited(self) -> float:
        """Seconds between submission and start (Slurm's own timestamps)."""
        if not self.submit or not self.start:
            return 0.0
        return (_ts(self.start) - _ts(self.submit)).total_seconds()

    def as_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "state": self.state,
            "gpu_indices": self.gpu_indices,
            "gpu_uuids": self.gpu_uuids,
            "uuid_source": self.uuid_source,
            "pending_reasons": self.reasons,
            "submit": self.submit,
            "start": self.start,
            "end": self.end,
            "waited_s": self.waited,
        }


def _ts(text: str) -> datetime:
    return datetime.fromisoformat(text)


@mutable
class Phase:
    count: int
    jobs: list[JobTrace]
    problems: list[str] = field(default_factory=list)


# complexity: the steps share the traces by job id: the submit fills them, the watch updates them, a
# timeout ends the phase with what they hold; split, the traces would be passed through each helper.
def run_phase(
    scripts: list[tuple[str, float]],
    *,
    user: str | int | None,
    env: Mapping[str, str] | None,
    slurm_env: Mapping[str, str] | None,
    cwd: str | None,
    record_dir: str,
    inventory: Mapping[int, str],
    timeout: float,
    interval: float = 0.5,
    on_update: Callable[[JobInfo], None] | None = None,
) -> Phase:
    """Submit each (script, hold seconds) in order and follow the jobs until they end;
    a job whose record gave no UUIDs gets those of ``inventory`` (the node's, by index).

    ``env`` is sbatch's environment, which the job inherits (the submitting user's);
    ``slurm_env`` is the one our own squeue/sacct/scontrol calls run with. They differ
    (HOME, USER...) and both must point at the cluster; ``None`` is this process's.
    """
    traces: dict[str, JobTrace] = {}
    for script, hold in scripts:  # in order: a trace per job, by its id
        res = submit_script(script, user=user, env=env, cwd=cwd)
        if res.error is not None:
            raise res.error
        traces[res.job_ids[0]] = JobTrace(res.job_ids[0], hold)
    ids = list(traces)
    last: dict[str, tuple[str, str, tuple[int, ...]]] = {}
    # The watcher asks only about unfinished jobs and scontrol once per running job.
    polls = watch_jobs(
        ids, interval=interval, timeout=timeout, record_dir=record_dir, env=slurm_env
    )
    try:
        for snapshot in polls:
            for info in snapshot:
                traces[info.job_id].update(info)
                key = (info.state, info.reason, tuple(info.gpu_indices))
                if on_update and last.get(info.job_id) != key:
                    on_update(info)
                last[info.job_id] = key
    except TimeoutError as exc:
        phase = Phase(len(ids), list(traces.values()))
        phase.problems.append(str(exc))
        return phase
    for t in traces.values():  # the UUIDs a job record gave none of: by index
        if not t.gpu_uuids and t.gpu_indices:
            t.gpu_uuids = [inventory.get(i, "?") for i in t.gpu_indices]
            t.uuid_source = "inventory"
    phase = Phase(len(ids), list(traces.values()))
    phase.problems = check_phase(phase.jobs, gpus_on_node=len(inventory))
    return phase


def check_phase(jobs: list[JobTrace], *, gpus_on_node: int) -> list[str]:
    """What in this phase did not behave as expected (one GPU per job, queue, hand-over)."""
    problems: list[str] = []
    for j in jobs:
        if j.state != "COMPLETED":
            problems.append(f"job {j.job_id} ended {j.state}, not COMPLETED")
        if len(j.gpu_indices) != 1:
            problems.append(f"job {j.job_id} got GPUs {j.gpu_indices}, not exactly one")
    if problems:
        return problems
    for a in jobs:
        for b in jobs:
            if a.job_id < b.job_id and a.gpu_indices == b.gpu_indices and _overlap(a, b):
                problems.append(f"jobs {a.job_id} and {b.job_id} held GPU {a.gpu_indices} at once")
    ordered = sorted(jobs, key=lambda j: (_ts(j.start), int(j.job_id)))
    return problems + _queue_problems(jobs, ordered[:gpus_on_node], ordered[gpus_on_node:])


# complexity: the rules the queue phase must show, each with its own message; the count is the
# comprehensions' clauses (which first jobs overlap, which job freed a GPU), which read as the rule
# they state.
def _queue_problems(
    jobs: list[JobTrace], first: list[JobTrace], later: list[JobTrace]
) -> list[str]:
    """The first jobs ran together; each later one waited and took a GPU another freed."""
    # Each pair of the first jobs that did not run at the same time.
    problems = [
        f"jobs {a.job_id} and {b.job_id} did not run at the same time"
        for a in first
        for b in first
        if a is not b and not _overlap(a, b)
    ]
    for j in later:
        if not {"Resources", "Priority"} & set(j.reasons):
            problems.append(f"job {j.job_id} did not wait for a GPU (pending reasons {j.reasons})")
        # Another job that ended on j's GPUs after j was submitted, before it started.
        freed = [
            o
            for o in jobs
            if o is not j
            and o.gpu_indices == j.gpu_indices
            and _ts(j.submit) <= _ts(o.end)
            and _ts(o.end) <= _ts(j.start)
        ]
        if not freed:
            problems.append(f"job {j.job_id} did not start on a GPU freed by an ended job")
    if later and not any("Resources" in j.reasons for j in later):
        problems.append("no waiting job showed the pending reason Resources")
    return problems


def _overlap(a: JobTrace, b: JobTrace) -> bool:
    return _ts(a.start) < _ts(b.end) and _ts(b.start) < _ts(a.end)
