"""Submit, query and cancel jobs through Slurm's CLI, batched.

``query_jobs`` answers for any number of jobs with one ``squeue`` call scoped to their
ids (which brings the GPUs each running job's prologs recorded in its AdminComment), one
``sacct`` call for jobs that already left the controller's memory, and ``scontrol`` for
the GPUs of running jobs neither the comment nor the caller's ``GpuCache`` has (a
prolog still writing, a node without acbslurm's prolog): one call per job for a few of
them, one listing of the controller's jobs for more. The number of Slurm calls never
grows past that bound with the number of jobs.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from acbslurm.errors import ConfigError, SlurmError
from acbslurm.gpuvalue import Gpu
from acbslurm.slurm.commands import slurm
from acbslurm.slurm.jobparse import (
    OOM,
    SACCT_FIELDS,
    SQUEUE_FORMAT,
    drop_stale_reason,
    job_order,
    oom_state,
    parse_job_gpus,
    parse_job_id,
    parse_sacct,
    parse_squeue_gpus,
)
from acbslurm.slurm.jobtypes import JobGres, JobInfo, SubmitResult
from acbslurm.slurm.states import HOLDING_STATES, LIVE_STATES
from acbslurm.values import frozen, replace

# jobrecord, concurrent.futures and pyslurm_backend (the optional pyslurm backend) are
# imported in the functions that use them: `acbslurm status` needs none of them to list
# jobs without records.

if TYPE_CHECKING:
    from acbslurm.jobrecord import JobRecord


def _debug(msg: str, *args: object) -> None:
    # Only where an entry point configured logging: unconfigured, nobody would see it.
    logging = sys.modules.get("logging")
    if logging is not None:
        logging.getLogger(__name__).debug(msg, *args)


# What squeue and scontrol print for an id the controller does not know (any more).
_INVALID_JOB_ID = "invalid job id specified"
# scontrol takes one job id a call: this many calls at once, quick for a watcher and
# gentle on slurmctld (each is a cheap single-job request).
_SCONTROL_PARALLEL = 4
# More running jobs than this to ask about: one listing of every job instead of a call
# each. A call is a fork, a munge credential and a request, so hundreds of jobs took
# seconds; the listing costs what the controller's whole table does, ended jobs included
# until MinJobAge, so a few jobs are asked one by one, by `status` without ids too
# (docs/benchmarks.md, "`acbslurm status` on a long queue").
_SCONTROL_ONE_BY_ONE = 16


def sacct_jobs(
    job_ids: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    steps: bool = False,
) -> list[JobInfo]:
    """What slurmdbd has of ``job_ids`` (one sacct call): a row per job; with ``steps``
    their steps' rows come in the same answer, read only for their states: a FAILED job
    whose container's step was OOM-killed is OUT_OF_MEMORY (``parse_sacct``).

    ``check=False``: an unreachable slurmdbd gives no rows instead of an error.
    """
    argv = ["sacct", "-n", "-P", *([] if steps else ["-X"]), "-j", ",".join(job_ids)]
    argv.append(f"--format={SACCT_FIELDS}")
    return parse_sacct(slurm(argv, env=env, check=check).stdout)


def _read_record(
    record_dir: str, job_id: str, names: frozenset[str] | None = None
) -> JobRecord | None:
    """The prolog's job record, if this node has a readable one (display only);
    ``names``: the directory's listing, so that a job without a record costs no open."""
    from acbslurm.jobrecord import read_record

    if not record_dir or (names is not None and f"{job_id}.json" not in names):
        return None
    try:
        return read_record(record_dir, job_id)
    except ConfigError:  # not a plain job id (12_[1-3]), or a broken record
        return None


# GPU indices of running jobs, as scontrol named them, keyed by squeue's id and the
# start time: an allocation never changes while a job runs, and a requeued job starts
# again (a new start time) on whichever GPUs are free then. A caller that polls keeps
# one (JobWatcher does) so each job run is asked about once.
GpuCache = dict[tuple[str, str], JobGres]


def query_jobs(
    job_ids: Sequence[str] = (),
    *,
    user: str | None = None,
    record_dir: str = "",
    env: Mapping[str, str] | None = None,
    gpu_cache: GpuCache | None = None,
    backend: str = "cli",
) -> list[JobInfo]:
    """State of ``job_ids`` (or all jobs of ``user`` / everyone), in a few batched calls.

    An array's own id (what sbatch prints for ``--array``) stands for all its tasks:
    it comes back as one row per task (``array_job_id`` set), live ones from squeue
    and the ones the controller already forgot from sacct. ``backend`` "pyslurm" asks
    the controller in-process instead of squeue and scontrol (this process's Slurm:
    ``env`` must be None).
    """
    wanted = list(dict.fromkeys(job_ids))
    if gpu_cache is None:
        gpu_cache = {}
    found = {j.job_id: j for j in _controller_rows(wanted, user, env, backend, gpu_cache)}
    for job in found.values():
        drop_stale_reason(job)
    if not wanted:
        jobs = sorted(found.values(), key=lambda j: job_order(j.job_id))
    else:
        jobs = _scoped_rows(wanted, found, env)
    running = [j for j in jobs if j.state in HOLDING_STATES]
    if running:
        _add_gpus(running, record_dir, env, cache=gpu_cache)
    return jobs


# complexity: each step settles what the next reads (sacct asked, its rows cleaned, its codes on the
# controller's ended rows, then each id's rows) over the same three maps; split, every helper would
# take and return them.
def _scoped_rows(
    wanted: list[str], found: dict[str, JobInfo], env: Mapping[str, str] | None
) -> list[JobInfo]:
    """The rows of ``wanted`` in their order: the controller's, sacct's for the rest."""
    old, unknown_why = {}, ""
    ask = _sacct_asked(wanted, found)
    if ask:
        try:
            old = {j.job_id: j for j in sacct_jobs(ask, env=env, steps=True)}
        except SlurmError as exc:
            # slurmdbd down: what slurmctld knows still counts; the rest is unknown
            # for a reason the user should see.
            detail = (exc.stderr or exc.reason).strip().splitlines() or ["no output"]
            unknown_why = f"slurmdbd not answering (sacct: {detail[-1][:120]})"
    for job in old.values():
        drop_stale_reason(job)
    # sacct's exit code (and reason, if squeue had none) on squeue's rows of ended jobs,
    # and OUT_OF_MEMORY where sacct saw a step of the FAILED job run out of memory.
    for jid, job in found.items():
        known = old.get(jid)
        if job.finished and known is not None:
            job.exit_code = job.exit_code or known.exit_code
            job.reason = job.reason or known.reason
            if known.state == OOM:
                job.state = oom_state(job.state)
    jobs = []
    for w in wanted:
        rows = _rows_of(w, found, old)
        jobs.extend(rows or [JobInfo(job_id=w, state="UNKNOWN", reason=unknown_why)])
    return jobs


# complexity: the count is the comprehensions' conditions: three rules over one list, each with its
# reason beside it; a helper per rule would be a one-line function called once.
def _sacct_asked(wanted: list[str], found: Mapping[str, JobInfo]) -> list[str]:
    """The wanted ids sacct is asked about: those the controller does not show, arrays
    it shows (it may have forgotten tasks) and jobs it shows ended (for exit codes)."""
    # An array the controller shows may have tasks it already forgot: ask sacct too.
    arrays_shown = {k.split("_", 1)[0] for k in found if "_" in k}
    # squeue has no exit code: sacct gives it for the jobs that ended, and their steps'
    # states (a FAILED job's container step may have run out of memory; pyslurm's rows
    # have codes, not those).
    ended = {
        w
        for w in wanted
        if (job := found.get(w)) is not None
        and job.finished
        and (not job.exit_code or job.state == "FAILED")
    }
    return [w for w in wanted if w not in found or w in arrays_shown or w in ended]


# complexity: an array's own row is kept or dropped by what its tasks' rows say, so both are read in
# one frame; split, the tasks would be passed back for that one rule.
def _rows_of(w: str, found: Mapping[str, JobInfo], old: Mapping[str, JobInfo]) -> list[JobInfo]:
    """The rows of one wanted id: its own record and, for an array's id, its tasks'
    rows (``12_1``, ``12_[2-3]``; the controller's before sacct's); [] if none."""
    own = found.get(w) or old.get(w)
    tasks: dict[str, JobInfo] = {}
    if "_" not in w:
        for source in (found, old):
            for jid, job in source.items():
                if jid.startswith(w + "_") and jid not in tasks:
                    job.array_job_id = w
                    tasks[jid] = job
    if tasks and own is not None:
        # The array's own record shows up by its bare id only for moments (e.g.
        # its pending rest just cancelled); the task rows say the same once
        # settled. Kept while unfinished, so a watcher never misses live work.
        own.array_job_id = w
        if own.finished:
            own = None
    rows = sorted(tasks.values(), key=lambda j: job_order(j.job_id))
    return ([own] if own is not None else []) + rows


def _controller_rows(
    wanted: list[str],
    user: str | None,
    env: Mapping[str, str] | None,
    backend: str,
    gpu_cache: GpuCache,
) -> list[JobInfo]:
    """What the controller has: squeue's rows, or pyslurm's; the GPUs either brought
    into the cache, so that scontrol is not asked for them."""
    if backend != "pyslurm":
        rows, gres = _squeue(wanted, user, env)
    elif env is not None:  # a caller's bug (no option leads here): a builtin, not the tree
        raise ValueError("the pyslurm backend queries this process's own Slurm")
    else:
        from acbslurm.slurm import pyslurm_backend

        rows, gres = pyslurm_backend.controller_jobs(wanted, user)
    for row in rows:
        if row.job_id in gres:
            gpu_cache[(row.job_id, row.start_time)] = gres[row.job_id]
    return list(rows)


def squeue_argv(wanted: Sequence[str], user: str | None) -> list[str]:
    """squeue's command for the jobs ``wanted`` (all queued ones when none), of ``user``."""
    # -a: jobs of a hidden partition (Hidden=YES, which submit takes) are listed too.
    argv = ["squeue", "-a", "-h", "-O", SQUEUE_FORMAT]
    if wanted:
        # -t all: finished jobs the controller still remembers (MinJobAge) come back too.
        argv += ["-t", "all", "--jobs=" + ",".join(dict.fromkeys(wanted))]
    if user:
        argv += ["-u", user]
    return argv


def _squeue(
    wanted: list[str], user: str | None, env: Mapping[str, str] | None
) -> tuple[list[JobInfo], dict[str, JobGres]]:
    """squeue's rows for ``wanted`` (all jobs, or ``user``'s, when none are given), and
    the GPUs their AdminComments record (``parse_squeue_gpus``).

    ``--jobs=`` rather than ``-j 1,2``: squeue's -j takes an optional argument, so only
    the attached form is parsed as written (its man page says so). An array's own id
    matches all its tasks (squeue filters on ArrayJobId as well as JobId), so the tasks
    come back as rows 12_1, 12_[2-3]...

    What the controller does for it (Slurm 22.05's squeue): for one id it sends that
    job alone; for several it still fetches the job table (or, with one ``user``, that
    user's jobs) and filters it itself, so the output is small but not the request.
    """
    argv = squeue_argv(wanted, user)
    try:
        return parse_squeue_gpus(slurm(argv, env=env, controller=True).stdout)
    except SlurmError as exc:
        # With one id squeue asks the controller for that job alone, and one it forgot
        # fails ("slurm_load_jobs error: Invalid job id specified", exit 1); with several
        # ids the forgotten ones are just absent. Either way sacct answers for them.
        if wanted and _INVALID_JOB_ID in exc.stderr.lower():
            return [], {}
        raise


# complexity: three sources joined per job in the order they win (the cache, scontrol asked once for
# what it lacks, this node's record), the record folder listed once before the loop; split, each
# step would take the same four arguments and the reader would hop to learn which source wins.
def _add_gpus(
    jobs: list[JobInfo],
    record_dir: str,
    env: Mapping[str, str] | None,
    *,
    cache: GpuCache,
) -> None:
    """Each running job's GPUs: scontrol's (or the cache's) indices, with the UUIDs of
    the prolog's job record where this node has one."""
    unknown = [j for j in jobs if (j.job_id, j.start_time) not in cache]
    shown = _ask_gpus(unknown, env) if unknown else {}
    # The records' names, listed once for every job (a submit host has none); None when
    # the folder cannot be listed (each record is then opened by its name).
    names: frozenset[str] | None = frozenset()
    if record_dir:
        try:
            names = frozenset(os.listdir(record_dir))
        except FileNotFoundError:
            pass
        except OSError:  # searchable but not readable: the records may still be there
            names = None
    # Only what names GPUs is kept: a job that ended between squeue and scontrol shows
    # none (GRES=), which must not stick. A job without GPUs is asked again each time
    # (acbslurm's own jobs all have one).
    cache.update(
        {
            (j.job_id, j.start_time): shown[j.job_id]
            for j in unknown
            if j.job_id in shown and shown[j.job_id].indices
        }
    )
    for job in jobs:
        found = cache.get((job.job_id, job.start_time))
        # squeue's RUNNING row of a job that scontrol, asked just after, shows ending
        # (COMPLETING, or ended) with its GPUs already released (``GRES=``): the row says
        # COMPLETING, so that no RUNNING job is shown holding no GPU. Short array tasks
        # did that (``12_1 RUNNING``, ``gpu_indices: []``). Not scontrol's final state:
        # that comes, with sacct's exit code and reason, next time (a watcher would
        # otherwise close the job on half a record).
        later = shown.get(job.job_id)
        ending = later is not None and later.state not in ("", "RUNNING", "SUSPENDED")
        if found is None and ending and job.state == "RUNNING":
            job.state = "COMPLETING"
        job.gpus = list(found.gpus) if found else []
        # The prolog names the record after the JobId (SLURM_JOB_ID), 14 for task 12_1.
        record = _read_record(record_dir, found.job_id if found else job.job_id, names)
        if record:
            job.gpus = with_record(job.gpus, record)


def with_record(gpus: list[Gpu], record: JobRecord) -> list[Gpu]:
    """``gpus`` (slurmctld's) with the UUIDs of those the record of their node holds;
    the record's own when slurmctld named none (a job just ended)."""
    if not gpus:
        return list(record.gpus)
    if all(g.index is None for g in record.gpus) and len(record.gpus) == len(gpus):
        return [replace(g, uuid=r.uuid) for g, r in zip(gpus, record.gpus, strict=True)]
    mine = {g.index: g.uuid for g in record.gpus}
    return [
        replace(g, uuid=mine[g.index]) if g.node in ("", record.node) and g.index in mine else g
        for g in gpus
    ]


def _ask_gpus(jobs: list[JobInfo], env: Mapping[str, str] | None) -> dict[str, JobGres]:
    """scontrol's records of running ``jobs`` by squeue's id: per job when few, else
    all at once (one listing, only these jobs' lines parsed).

    ``scontrol show job`` takes one id; an array's own id shows all its records, so
    the tasks a caller asked for by the array's id cost one call together.
    """
    targets = list(dict.fromkeys(j.array_job_id or j.job_id for j in jobs))
    if len(targets) > _SCONTROL_ONE_BY_ONE:
        argv = ["scontrol", "-d", "-o", "show", "job"]
        text = slurm(argv, env=env, controller=True).stdout
        return parse_job_gpus(text, only={j.job_id for j in jobs})
    if len(targets) == 1:
        texts = [_show_job(targets[0], env)]
    else:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(_SCONTROL_PARALLEL, len(targets))) as pool:
            texts = list(pool.map(lambda target: _show_job(target, env), targets))
    shown: dict[str, JobGres] = {}
    for text in texts:
        shown.update(parse_job_gpus(text))
    return shown


def _show_job(job_id: str, env: Mapping[str, str] | None) -> str:
    """``scontrol -d -o show job ID``; empty when the controller no longer has it."""
    res = slurm(
        ["scontrol", "-d", "-o", "show", "job", job_id], env=env, check=False, controller=True
    )
    if res.returncode != 0:
        _debug("scontrol show job %s: %s", job_id, res.stderr.strip())
        return ""
    return res.stdout


# complexity: the pyslurm branch returns early; the rest is the pool's loop, whose rule (after a
# failure, cancel what has not started, keep the ids of what ran) needs the futures at hand, so it
# stays beside the loop it stops.
def submit_script(
    script: str,
    *,
    count: int = 1,
    user: str | int | None = None,
    env: Mapping[str, str] | None = None,
    extra_env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    parallel: int = 8,
    backend: str = "cli",
) -> SubmitResult:
    """Submit ``script`` ``count`` times (several sbatch calls at once, ids in order).

    sbatch has no call that submits N independent jobs, so the calls overlap instead of
    running one after another. After a failure no further jobs are started; the ids
    already submitted come back with the error.
    """
    if count < 1:
        raise ConfigError(f"a submission of {count} jobs: count must be at least 1")
    if backend == "pyslurm":
        if user is not None or env is not None or extra_env:
            raise ConfigError(
                "the pyslurm backend submits as this process's user with its environment"
            )
        from acbslurm.slurm import pyslurm_backend

        return pyslurm_backend.submit_script(script, count=count, cwd=cwd)

    def one(_: int) -> str:
        # env is the submitter's environment (HOME, PYTHONPATH, XDG_RUNTIME_DIR...): the
        # job inherits sbatch's environment (--export=ALL), so it must not be ours.
        res = slurm(
            ["sbatch", "--parsable"],
            input=script,
            user=user,
            env=env,
            extra_env=extra_env,
            cwd=cwd,
        )
        try:
            return parse_job_id(res.stdout)
        except ValueError as exc:
            raise SlurmError(res.argv, res.returncode, res.stdout, res.stderr, str(exc)) from None

    from concurrent.futures import CancelledError, ThreadPoolExecutor

    result = SubmitResult([], requested=count)
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, count))) as pool:
        futures = [pool.submit(one, i) for i in range(count)]
        for fut in futures:  # in order; the first failure cancels the calls not started
            try:
                result.job_ids.append(fut.result())
            except CancelledError:
                continue  # never started: counted as not attempted
            except SlurmError as exc:
                result.failed += 1
                result.error = result.error or exc
                for other in futures:
                    other.cancel()  # calls already running still finish: their ids count
    result.job_ids.sort(key=lambda j: [int(p) for p in j.split("_")])
    return result


@frozen
class CancelOutcome:
    """What ``cancel_known`` did: the ids it cancelled, the ones that had already ended
    (with their tasks' end states), the ones Slurm does not know."""

    cancelled: list[str]
    ended: dict[str, list[str]]
    unknown: list[str]
    unknown_rows: list[JobInfo]  # the UNKNOWN rows of ``unknown`` (their reasons)


# complexity: one query, then each id sorted into unknown, ended or live (an array's tasks
# together), then one scancel: the three lists are built and used in one frame, so a split would
# pass them all out and back.
def cancel_known(
    job_ids: Sequence[str], *, backend: str = "cli", signal: str = "", full: bool = False
) -> CancelOutcome:
    """Cancel those of ``job_ids`` that still run or wait (or, with ``signal``, send
    them that signal: their steps', with ``full`` the batch script's too); an array's
    id stands for all its tasks. One batched query first, so an id that ended or that
    Slurm forgot is told apart (scancel says nothing about either) and never sent to
    scancel."""
    ids = list(dict.fromkeys(job_ids))
    rows: dict[str, list[JobInfo]] = {i: [] for i in ids}
    for job in query_jobs(ids, backend=backend):
        rows[job.array_job_id or job.job_id].append(job)
    unknown: list[str] = []
    ended: list[str] = []
    live: list[str] = []
    for i in ids:  # an array's tasks together
        if all(j.state == "UNKNOWN" for j in rows[i]):
            unknown.append(i)
        elif all(j.finished for j in rows[i]):
            ended.append(i)
        else:
            live.append(i)
    if signal:
        signal_jobs(live, signal, full)
    else:
        cancel_jobs(live, backend=backend)
    return CancelOutcome(
        cancelled=live,
        ended={i: sorted({j.state for j in rows[i]}) for i in ended},
        unknown=unknown,
        unknown_rows=[j for i in unknown for j in rows[i]],
    )


def signal_jobs(job_ids: Sequence[str], signal: str, full: bool = False) -> None:
    """``signal`` to the steps of ``job_ids`` (with ``full``, their batch scripts too)."""
    if job_ids:
        slurm(["scancel", f"--signal={signal}", *(["--full"] if full else []), *job_ids])


def cancel_jobs(
    job_ids: Sequence[str],
    *,
    user: str | int | None = None,
    env: Mapping[str, str] | None = None,
    backend: str = "cli",
) -> None:
    """Cancel ``job_ids`` with one scancel call (pyslurm: plain ids in-process)."""
    if backend == "pyslurm" and user is None and env is None:
        from acbslurm.slurm import pyslurm_backend

        pyslurm_backend.cancel_jobs([j for j in job_ids if "_" not in j])
        job_ids = [j for j in job_ids if "_" in j]
    if job_ids:
        slurm(["scancel", *job_ids], user=user, env=env)


def cancel_and_wait(
    *,
    user: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
    interval: float = 0.3,
) -> None:
    """Cancel every job (of ``user``, else of everyone) and wait until none is left.

    "Left" means pending, running or completing: a cancelled job's epilog must be done
    before its GPUs are free again. scancel is repeated while jobs remain (a job
    submitted meanwhile, a requeue). Raises ``SlurmError`` after ``timeout`` seconds.
    """
    who = ["-u", user] if user else []
    deadline = time.monotonic() + timeout
    while True:
        left = slurm(
            ["squeue", "-h", "-t", ",".join(LIVE_STATES), "-o", "%i", *who], env=env
        ).stdout.split()
        if not left:
            return
        slurm(["scancel", *who] if user else ["scancel", *left], env=env, check=False)
        if time.monotonic() >= deadline:
            raise SlurmError(
                ["squeue"], 0, reason=f"jobs still queued after {timeout:g} s: {' '.join(left)}"
            )
        time.sleep(interval)
