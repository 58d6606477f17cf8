"""GPU-seconds of job rows under the two definitions Slurm itself uses.

* ``sacct`` (default): one row per job id, the newest (largest ``time_submit``), as
  ``sacct`` without ``-D`` shows it; GPU-seconds = GPUs x ElapsedRaw, where ElapsedRaw is
  (end, or now while running) - start - suspended. The window only selects jobs (those
  eligible before its end and not ended before its start); it does not clip them.
* ``sreport``: every row (a requeued job's earlier runs too), GPUs x wall time clipped
  to the window; suspended time is not subtracted. This is what sreport's rollups count.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

from acbslurm.accounting.tres import tres_count
from acbslurm.slurm.gpu_history import PREFIX, gpu_items
from acbslurm.slurm.job_history import record_text
from acbslurm.slurm.states import JOB_RESIZING, state_name
from acbslurm.slurm.usage_history import PREFIX as USAGE_PREFIX
from acbslurm.slurm.usage_history import parse_usage
from acbslurm.values import frozen, mutable

DEFINITIONS = ("sacct", "sreport")
DEFINITION_TEXT = {
    "sacct": (
        "sacct: newest row per job id; GPU-seconds = gres/gpu x (end or now - start - "
        "suspended); the window selects jobs, it does not clip them"
    ),
    "sreport": (
        "sreport: every row (requeued runs too); GPU-seconds = gres/gpu x wall time "
        "clipped to the window; suspended time not subtracted"
    ),
}
# id_array_task of an array's pending meta-row (NO_VAL - 1... as slurmdbd stores it).
ARRAY_META_TASK = 4294967294
NO_VAL = 4294967295
STATE_SUSPENDED = 2


class JobRow(NamedTuple):
    """One job-table row, columns in the order queries.JOB_SELECT names them."""

    job_db_inx: int
    id_job: int
    id_array_job: int
    id_array_task: int
    array_task_str: str | None
    id_user: int
    account: str | None
    partition: str | None
    state: int
    time_submit: int
    time_eligible: int
    time_start: int
    time_end: int
    time_suspended: int
    tres_alloc: str | None
    assoc_user: str | None
    # acbslurm's record of the job: the prologs keep its GPUs in the AdminComment, the
    # epilogs copy them and a pool's usage into the SystemComment (slurm/job_history.py)
    admin_comment: str | None = None
    system_comment: str | None = None


@mutable
class JobUsage:
    job_id: str
    job_id_raw: int
    job_db_inx: int
    uid: int
    user: str
    account: str
    partition: str
    state: str
    running: bool
    gpus: int
    submit: int
    start: int
    end: int
    wait: int | None
    elapsed: int
    gpu_seconds: int
    # The part of [start, end) the GPU-seconds cover (for per-day splitting).
    span_start: int
    span_end: int
    # GPU utilization as Slurm 23.02+ records it per step (None: not recorded).
    gpu_util_ave: float | None = None
    gpu_util_max: float | None = None
    gpu_mem_max: float | None = None
    # The exact devices, from the prolog's AdminComment token ("" when not recorded):
    # ``vm:0=GPU-...,vm:1=GPU-...``.
    gpu_devices: str = ""
    # What a pool in the job kept (the epilog's AdminComment word): None for most jobs.
    pool: PoolUsage | None = None


@frozen
class PoolUsage:
    """A pool job's usage: its leased GPU-seconds, the ledger lines its pool could not
    write (0: complete), and per key name and model its requests, tokens and share."""

    leased: float
    lost: int
    use: tuple[dict[str, Any], ...]
    # Its keys' GPU-second budgets and their period's use (serve/limits.py).
    budgets: tuple[dict[str, Any], ...] = ()


def pool_usage(comment: str | None) -> PoolUsage | None:
    """The usage words of every node of the job, added up (None without any: fast)."""
    if not comment or USAGE_PREFIX not in comment:
        return None
    words = parse_usage(comment)
    if not words:
        return None
    return PoolUsage(
        leased=sum(float(w["leased"]) for w in words),
        lost=sum(int(w["lost"]) for w in words),
        use=tuple(u for w in words for u in w["use"]),
        budgets=tuple(b for w in words for b in w.get("budgets", ())),
    )


def devices_text(comment: str | None) -> str:
    """``node:index=uuid,...`` of the prolog's token, "" without one (most rows: fast)."""
    if not comment or PREFIX not in comment:
        return ""
    return ",".join(gpu_items(comment))


def display_id(row: JobRow) -> str:
    """``master_index`` for array tasks, ``master_[tasks]`` for an array's pending rest."""
    if row.id_array_job and row.id_array_task not in (NO_VAL,):
        if row.id_array_task == ARRAY_META_TASK:
            return f"{row.id_array_job}_[{row.array_task_str or ''}]"
        return f"{row.id_array_job}_{row.id_array_task}"
    return str(row.id_job)


def newest_rows(
    rows: Iterable[JobRow], dropped: Callable[[JobRow], None] | None = None
) -> Iterator[JobRow]:
    """sacct's de-duplication of rows ordered by (id_job, time_submit DESC).

    The first row of each id_job is the newest; later ones are earlier runs of a
    requeued job and are dropped (each handed to ``dropped``), except rows closed by a
    resize, which sacct keeps.
    """
    last = -1
    for row in rows:
        if row.id_job == last and row.state != JOB_RESIZING:
            if dropped is not None:
                dropped(row)
            continue
        last = row.id_job
        yield row


def sacct_elapsed(row: JobRow, now: int) -> tuple[int, int, int]:
    """(ElapsedRaw, span start, span end) exactly as slurmdbd computes it for sacct."""
    start, end = row.time_start, row.time_end
    if end and (not start or start > end):
        start = end
    suspended = row.time_suspended
    if row.state == STATE_SUSPENDED:
        # While suspended the column holds the moment of suspension, not a total.
        suspended = now - suspended
    if not start:
        return 0, 0, 0
    stop = end if end else now
    elapsed = stop - start - suspended
    return max(elapsed, 0), start, stop


def sreport_elapsed(row: JobRow, win_start: int, win_end: int, now: int) -> tuple[int, int, int]:
    """(wall seconds inside the window, span start, span end); suspension included."""
    if not row.time_start:
        return 0, 0, 0
    start = max(row.time_start, win_start)
    stop = min(row.time_end or now, win_end, now)
    if stop <= start:
        return 0, start, start
    return stop - start, start, stop


def compute(
    row: JobRow,
    gpu_tres_id: int | None,
    definition: str,
    win_start: int,
    win_end: int,
    now: int,
    user: str,
) -> JobUsage:
    gpus = tres_count(row.tres_alloc, gpu_tres_id)
    if definition == "sreport":
        seconds, s0, s1 = sreport_elapsed(row, win_start, win_end, now)
    else:
        seconds, s0, s1 = sacct_elapsed(row, now)
    running = row.time_start > 0 and row.time_end == 0
    record = record_text(row.admin_comment, row.system_comment)
    return JobUsage(
        job_id=display_id(row),
        job_id_raw=row.id_job,
        job_db_inx=row.job_db_inx,
        uid=row.id_user,
        user=user,
        account=row.account or "",
        partition=row.partition or "",
        state=state_name(row.state),
        running=running,
        gpus=gpus,
        submit=row.time_submit,
        start=row.time_start,
        end=row.time_end,
        wait=(row.time_start - row.time_submit) if row.time_start else None,
        elapsed=seconds,
        gpu_seconds=gpus * seconds,
        span_start=s0,
        span_end=s1,
        gpu_devices=devices_text(record),
        pool=pool_usage(record),
    )
