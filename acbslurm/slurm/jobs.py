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
import re
import sys
from collections.abc import Collection, Iterator, Mapping, Sequence

from acbslurm.errors import ConfigError, SlurmError
from acbslurm.gpuvalue import Gpu
from acbslurm.slurm.commands import slurm
from acbslurm.slurm.gpu_history import PREFIX
from acbslurm.slurm.hostlist import expand_hostlist
from acbslurm.slurm.jobtypes import JobGres, JobInfo, SubmitResult
from acbslurm.slurm.squeue_query import SQUEUE_FIELDS, squeue_argv
from acbslurm.slurm.states import HOLDING_STATES, LIVE_STATES, TERMINAL_STATES
from acbslurm.units import expand_ranges
from acbslurm.values import frozen, replace

# On status' path: no typing, logging or thread pool imported (each costs milliseconds of
# every `acbslurm status`; tests/unit/cli/test_status_fast.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from concurrent.futures import Future

    from acbslurm.jobrecord import JobRecord


def _warn(msg: str, *args: object) -> None:
    import logging  # only for a line Slurm printed that was not expected

    logging.getLogger(__name__).warning(msg, *args)


def _debug(msg: str, *args: object) -> None:
    # Only where an entry point configured logging: unconfigured, nobody would see it.
    logging = sys.modules.get("logging")
    if logging is not None:
        logging.getLogger(__name__).debug(msg, *args)


_SACCT_FIELDS = (
    "JobID,State,Elapsed,NodeList,User,Submit,Start,End,ExitCode,Partition,Reason,JobName"
)
OOM = "OUT_OF_MEMORY"
_IDX = re.compile(r"IDX:([0-9,\-]+)")
_GRES = re.compile(r"\bGRES=(\S+)")
_ARRAY_JOB = re.compile(r"\bArrayJobId=([0-9]+)")
_ARRAY_TASK = re.compile(r"\bArrayTaskId=([0-9]+)(?=\s|$)")  # one task, not 2-3 or 2,5
_JOB_STATE = re.compile(r"\bJobState=([A-Z_]+)")
# What squeue and scontrol print for an id the controller does not know (any more).
_INVALID_JOB_ID = "invalid job id specified"
# scontrol takes one job id a call: this many calls at once, quick for a watcher and
# gentle on slurmctld (each is a cheap single-job request).
_SCONTROL_PARALLEL = 4
# More running jobs than this to ask about: one listing of every job instead of a call
# each. A call is a fork, a munge credential and a request (10-20 ms on the sandbox), so
# 256 jobs took seconds; the listing costs what the controller's whole table does, ended
# jobs included until MinJobAge (0.45 s for a table of 6,000), so a few jobs are asked
# one by one, by `status` without ids too (bench/status_bench.py).
_SCONTROL_ONE_BY_ONE = 16
# The start of every ``scontrol -o show job`` line: its JobId and, for one array task,
# the id squeue shows it by (``ArrayJobId=12 ArrayTaskId=1``: 12_1).
_LINE_KEYS = re.compile(r"JobId=([0-9]+) (?:ArrayJobId=([0-9]+) ArrayTaskId=([0-9]+) )?")


def _clean_time(value: str) -> str:
    return "" if value in ("N/A", "Unknown", "None", "") else value


def _rows(text: str, fields: int, command: str) -> Iterator[list[str]]:
    """The ``|``-separated rows of ``command``'s output; the last field may hold ``|``."""
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|", fields - 1)
        if len(parts) != fields:
            _warn("unexpected %s line: %r", command, line)
            continue
        yield parts


# A job whose prolog has finished (PrologFlags=Alloc: slurmctld shows CONFIGURING with
# reason Prolog until every node's prolog ended). Before that the comment may still
# hold the GPUs of the job's run before a requeue; a COMPLETING job is asked (scontrol
# shows whether its GPUs are already released).
_PROLOG_DONE_STATES = ("RUNNING", "SUSPENDED")


def parse_squeue(text: str) -> list[JobInfo]:
    """Parse ``squeue -h -O SQUEUE_FORMAT`` output."""
    return parse_squeue_gpus(text)[0]


def parse_squeue_gpus(text: str) -> tuple[list[JobInfo], dict[str, JobGres]]:
    """``squeue -h -O SQUEUE_FORMAT``'s rows, and the GPUs of the running ones whose
    prologs all wrote theirs into the job's AdminComment (by squeue's id)."""
    jobs: list[JobInfo] = []
    recorded: dict[str, JobGres] = {}
    for parts in _rows(text, len(SQUEUE_FIELDS) + 1, "squeue"):
        job, own_id, comment = _squeue_row(parts)
        jobs.append(job)
        if PREFIX in comment and job.state in _PROLOG_DONE_STATES and job.reason != "Prolog":
            gpus = _comment_gpus(comment, job.node)
            if gpus:
                recorded[job.job_id] = JobGres(own_id, gpus, job.state)
    return jobs, recorded


def _squeue_row(parts: list[str]) -> tuple[JobInfo, str, str]:
    """One row of ``squeue -O SQUEUE_FORMAT``: the job, its own id, its AdminComment."""
    jid, own_id, state, reason, elapsed, node, user, submit, start, end, partition, rest = parts
    comment, _, rest = rest.partition("\x1f")
    work_dir, _, name = rest.partition("\x1f")
    job = JobInfo(
        job_id=jid.strip(),
        state=state.strip(),
        reason="" if reason in ("None", "(null)") else reason,
        elapsed=elapsed,
        node="" if node in ("(null)", "n/a") else node,
        user=user,
        submit_time=_clean_time(submit),
        start_time=_clean_time(start) if state != "PENDING" else "",
        end_time=_clean_time(end) if state in TERMINAL_STATES else "",
        partition=partition,
        name=name,
        work_dir=work_dir if work_dir.startswith("/") else "",
    )
    return job, own_id.strip(), comment


def _comment_gpus(comment: str, nodelist: str) -> list[Gpu]:
    """The GPUs in ``comment`` of the nodes of ``nodelist``, in its order; [] unless
    every node has its token and each GPU its index (the prolog of a node may not have
    written yet, or not at all: scontrol is asked then)."""
    from acbslurm.slurm.jobgpus import gpus_in_comment

    nodes = _node_names(nodelist)
    gpus = gpus_in_comment(comment, nodes)
    on = {g.node for g in gpus}
    if not nodes or any(n not in on for n in nodes) or any(g.index is None for g in gpus):
        return []
    return gpus


def _node_names(nodelist: str) -> list[str]:
    """squeue's node list as names ([] when empty or not readable)."""
    try:
        return expand_hostlist(nodelist) if nodelist else []
    except ConfigError:
        return []


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
    argv.append(f"--format={_SACCT_FIELDS}")
    return parse_sacct(slurm(argv, env=env, check=check).stdout)


def parse_sacct(text: str) -> list[JobInfo]:
    """Parse ``sacct -n -P [-X] --format=_SACCT_FIELDS`` output: the jobs' rows; a
    step's row (``12.0``, ``12.batch``, ``5_1.extern``) only says whether the step ran
    out of memory, which makes its FAILED job OUT_OF_MEMORY (``oom_state``)."""
    jobs: list[JobInfo] = []
    oom_steps: set[str] = set()
    for parts in _rows(text, 12, "sacct"):
        jid, state = parts[0], parts[1]
        if "." in jid:
            if state.startswith(OOM):
                oom_steps.add(jid.split(".", 1)[0])
            continue
        jid, state, elapsed, node, user, submit, start, end, exit_code, partition, reason, name = (
            parts
        )
        jobs.append(
            JobInfo(
                job_id=jid,
                state=state.split()[0] if state else "UNKNOWN",  # "CANCELLED by 0"
                elapsed=elapsed,
                node="" if node in ("None assigned", "(null)") else node,
                user=user,
                submit_time=_clean_time(submit),
                start_time=_clean_time(start),
                end_time=_clean_time(end),
                exit_code=exit_code,
                partition=partition,
                reason="" if reason in ("None", "(null)") else reason,
                name=name,
            )
        )
    for job in jobs:
        if job.job_id in oom_steps:
            job.state = oom_state(job.state)
    return jobs


def oom_state(state: str) -> str:
    """A job's state once one of its steps ran out of memory: OUT_OF_MEMORY for a job
    that FAILED (Slurm says OUT_OF_MEMORY only when the batch step itself did, and a
    container started by ``srun acbslurm run`` is another step), as it was; any other
    state (COMPLETED: the script went on; CANCELLED, TIMEOUT) says more."""
    return OOM if state == "FAILED" else state


# scontrol -d names each group of nodes with the same allocation:
# ``Nodes=vm-[1-2] CPU_IDs=0 Mem=500 GRES=gpu:2(IDX:0-1)``.
_NODE_GROUP = re.compile(r"\bNodes=(\S+)(.*?)(?=\sNodes=|$)")


def _gpu_indices(gres: str) -> list[int]:
    indices: list[int] = []
    for chunk in re.split(r",(?=[a-z])", gres):
        if chunk.startswith("gpu"):
            for idx in _IDX.findall(chunk):
                indices.extend(expand_ranges(idx))
    return indices


def _line_gpus(line: str) -> list[Gpu]:
    """Each GPU of one ``scontrol -d -o show job`` line, on its node (scontrol -d's
    groups; node "" without them), by index: the UUIDs come from the AdminComment
    squeue gives, never from this line, whose job name may hold ``AdminComment=``."""
    groups = _NODE_GROUP.findall(line)
    try:
        nodes = [(n, seg) for expr, seg in groups for n in expand_hostlist(expr)] or [("", line)]
    except ConfigError:  # "Nodes=v[m" in a job's name
        return []
    if len({n for n, _ in nodes}) < len(nodes):
        # A node in two groups: one is a user's text (a job's name or comment holding
        # "Nodes=... GRES=..."), and which one Slurm printed cannot be told: none shown.
        return []
    return [Gpu("", i, node=node) for node, seg in nodes for i in _segment_indices(seg)]


def _segment_indices(segment: str) -> list[int]:
    """The GPU indices of every ``GRES=`` of ``segment``, sorted, once each."""
    return sorted({i for gres in _GRES.findall(segment) for i in _gpu_indices(gres)})


def _unwanted(line: str, only: Collection[str] | None) -> bool:
    """True for a line of a job ``only`` does not name (by JobId or squeue's task id):
    a listing of the whole queue is read for a few of its jobs, and the rest is skipped
    before any of the searches through its line."""
    if only is None:
        return False
    m = _LINE_KEYS.match(line)
    if m is None:
        return False  # not the usual start: parsed in full
    array, task = m.group(2), m.group(3)
    return m.group(1) not in only and not (array and f"{array}_{task}" in only)


def parse_job_gpus(text: str, only: Collection[str] | None = None) -> dict[str, JobGres]:
    """GPU indices per job from ``scontrol -d -o show job`` (``GRES=gpu:1(IDX:0)``);
    with ``only``, of those jobs alone (JobIds or squeue's ids).

    Keyed by ``JobId`` and, for an array task, also by ``ArrayJobId_ArrayTaskId``, the id
    squeue shows: task ``12_1`` is ``JobId=14 ArrayJobId=12 ArrayTaskId=1``, while
    ``JobId=12`` is the array's pending rest (``ArrayTaskId=2-3``) or whichever task
    started last, so the array's id says nothing about a given task's GPUs.
    """
    out: dict[str, JobGres] = {}
    for line in text.splitlines():
        if _unwanted(line, only):
            continue
        m = re.search(r"\bJobId=([0-9]+)", line)
        if not m:
            continue
        state = _JOB_STATE.search(line)
        job = JobGres(m.group(1), _line_gpus(line), state.group(1) if state else "")
        out[job.job_id] = job
        array, task = _ARRAY_JOB.search(line), _ARRAY_TASK.search(line)
        if array and task:
            out[f"{array.group(1)}_{task.group(1)}"] = job
    return out


def parse_gpu_indices(text: str) -> dict[str, list[int]]:
    """``parse_job_gpus``, indices only."""
    return {key: job.indices for key, job in parse_job_gpus(text).items()}


def _record_names(record_dir: str) -> frozenset[str] | None:
    """The file names in ``record_dir``, listed once for every job of a query (a submit
    host has no records at all); None when it cannot be listed (each record is then
    opened by its name, as before)."""
    if not record_dir:
        return frozenset()
    try:
        return frozenset(os.listdir(record_dir))
    except FileNotFoundError:
        return frozenset()
    except OSError:  # searchable but not readable: the records may still be there
        return None


def _read_record(
    record_dir: str, job_id: str, names: frozenset[str] | None = None
) -> JobRecord | None:
    """The prolog's job record, if this node has a readable one (display only);
    ``names``: the directory's listing, so that a job without a record costs no open."""
    from acbslurm.errors import ConfigError
    from acbslurm.jobrecord import read_record

    if not record_dir or (names is not None and f"{job_id}.json" not in names):
        return None
    try:
        return read_record(record_dir, job_id)
    except ConfigError:  # not a plain job id (12_[1-3]), or a broken record
        return None


def _array_tasks(array_id: str, *sources: Mapping[str, JobInfo]) -> list[JobInfo]:
    """The task rows (``12_1``, ``12_[2-3]``) of array ``12``; earlier sources win."""
    if "_" in array_id:
        return []
    prefix = array_id + "_"
    tasks: dict[str, JobInfo] = {}
    for source in sources:
        for jid, job in source.items():
            if jid.startswith(prefix) and jid not in tasks:
                job.array_job_id = array_id
                tasks[jid] = job
    return sorted(tasks.values(), key=lambda j: _task_order(j.job_id))


def _task_order(job_id: str) -> tuple[int, str]:
    task = job_id.split("_", 1)[1]
    digits = re.match(r"\[?([0-9]+)", task)
    return (int(digits.group(1)) if digits else 0, task)


def job_order(job_id: str) -> tuple[int, int, int, str]:
    """One order for every listing: by job (an array's id), then task numerically, the
    array's own row first and its pending rest (``12_[4-9]``) by its first task.

    ``status`` printed squeue's own order (partition, state, priority) and ``status
    12`` the tasks by number, so the same tasks came in two orders.
    """
    base, _, task = job_id.partition("_")
    number = int(base) if base.isascii() and base.isdigit() else 2**63
    if not task:
        return (number, 0, -1, "")
    return (number, 1, *_task_order(job_id))


# Reasons a job has only while it waits. squeue (and sacct) keep a job's last reason
# after it ended: a requeued job that then COMPLETED still says BeginTime, which tells
# nothing about how it ended. Prefixes, as Slurm's names come in families.
_WAITING_REASONS = (
    "BeginTime",
    "Priority",
    "Resources",
    "Dependency",
    "JobHeld",
    "ReqNode",
    "Reservation",
    "Licenses",
    "Partition",
    "Assoc",
    "QOS",
    "Max",
    "launch_failed_requeued_held",
    "Nodes_required",
    "Prolog",  # waiting for its prolog (PrologFlags=Alloc): the sandbox showed it kept
    "None",
)


def drop_stale_reason(job: JobInfo) -> None:
    """A finished job keeps only a reason about its end. A COMPLETED job has none (on
    the sandbox a requeued one kept ``BeginTime``, or the ``Prolog`` of its second
    start); another ended one loses a waiting reason once it started; a job cancelled
    while it waited keeps its (why it never ran)."""
    if not job.finished or not job.reason:
        return
    waited = job.reason.startswith(_WAITING_REASONS)
    if job.state == "COMPLETED" or (job.start_time and waited):
        job.reason = ""


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


def _scoped_rows(
    wanted: list[str], found: dict[str, JobInfo], env: Mapping[str, str] | None
) -> list[JobInfo]:
    """The rows of ``wanted`` in their order: the controller's, sacct's for the rest."""
    old, unknown_why = _sacct_rows(_sacct_asked(wanted, found), env)
    for job in old.values():
        drop_stale_reason(job)
    _add_exit_codes(found, old)
    jobs = []
    for w in wanted:
        rows = _rows_of(w, found, old)
        jobs.extend(rows or [JobInfo(job_id=w, state="UNKNOWN", reason=unknown_why)])
    return jobs


def _sacct_asked(wanted: list[str], found: Mapping[str, JobInfo]) -> list[str]:
    """The wanted ids sacct is asked about: those the controller does not show, arrays
    it shows (it may have forgotten tasks) and jobs it shows ended (for exit codes)."""
    # An array the controller shows may have tasks it already forgot: ask sacct too.
    arrays_shown = {k.split("_", 1)[0] for k in found if "_" in k}
    # squeue has no exit code: sacct gives it for the jobs that ended, and their steps'
    # states (a FAILED job's container step may have run out of memory; pyslurm's rows
    # have codes, not those).
    ended = {w for w in wanted if _sacct_tells_more(found.get(w))}
    return [w for w in wanted if w not in found or w in arrays_shown or w in ended]


def _sacct_tells_more(job: JobInfo | None) -> bool:
    return job is not None and job.finished and (not job.exit_code or job.state == "FAILED")


def _sacct_rows(ask: list[str], env: Mapping[str, str] | None) -> tuple[dict[str, JobInfo], str]:
    """sacct's rows of ``ask`` by id, and why the rest is unknown ("" if sacct answered)."""
    if not ask:
        return {}, ""
    try:
        return {j.job_id: j for j in sacct_jobs(ask, env=env, steps=True)}, ""
    except SlurmError as exc:
        # slurmdbd down: what slurmctld knows still counts; the rest is unknown
        # for a reason the user should see.
        detail = (exc.stderr or exc.reason).strip().splitlines() or ["no output"]
        return {}, f"slurmdbd not answering (sacct: {detail[-1][:120]})"


def _rows_of(w: str, found: Mapping[str, JobInfo], old: Mapping[str, JobInfo]) -> list[JobInfo]:
    """The rows of one wanted id: its own record and its array's tasks ([] if none)."""
    own = found.get(w) or old.get(w)
    tasks = _array_tasks(w, found, old)
    if tasks and own is not None:
        # The array's own record shows up by its bare id only for moments (e.g.
        # its pending rest just cancelled); the task rows say the same once
        # settled. Kept while unfinished, so a watcher never misses live work.
        own.array_job_id = w
        if own.finished:
            own = None
    return ([own] if own is not None else []) + tasks


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


def _add_exit_codes(found: Mapping[str, JobInfo], old: Mapping[str, JobInfo]) -> None:
    """sacct's exit code (and reason, if squeue had none) on squeue's rows of ended jobs,
    and OUT_OF_MEMORY where sacct saw a step of the FAILED job run out of memory."""
    for jid, job in found.items():
        known = old.get(jid)
        if job.finished and known is not None:
            job.exit_code = job.exit_code or known.exit_code
            job.reason = job.reason or known.reason
            if known.state == OOM:
                job.state = oom_state(job.state)


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


def _add_gpus(
    jobs: list[JobInfo],
    record_dir: str,
    env: Mapping[str, str] | None,
    *,
    cache: GpuCache,
) -> None:
    unknown = [j for j in jobs if (j.job_id, j.start_time) not in cache]
    shown = _ask_gpus(unknown, env) if unknown else {}
    names = _record_names(record_dir)
    # Only what names GPUs is kept: a job that ended between squeue and scontrol shows
    # none (GRES=), which must not stick. A job without GPUs is asked again each time
    # (acbslurm's own jobs all have one).
    cache.update(
        {(j.job_id, j.start_time): shown[j.job_id] for j in unknown if _has_gpus(shown, j)}
    )
    for job in jobs:
        found = cache.get((job.job_id, job.start_time))
        if found is None and job.job_id in shown:
            _moved_on(job, shown[job.job_id])
        _set_gpus(job, found, record_dir, names)


def _set_gpus(
    job: JobInfo, found: JobGres | None, record_dir: str, names: frozenset[str] | None
) -> None:
    """``job``'s GPUs from scontrol's record (``found``) and the prolog's job record."""
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


def _has_gpus(shown: Mapping[str, JobGres], job: JobInfo) -> bool:
    return job.job_id in shown and bool(shown[job.job_id].indices)


def _moved_on(job: JobInfo, later: JobGres) -> None:
    """squeue's RUNNING row of a job that scontrol, asked just after, shows ending
    (COMPLETING, or ended) with its GPUs already released (``GRES=``): the row says
    COMPLETING, so that no RUNNING job is shown holding no GPU. Short array tasks did
    that (``12_1 RUNNING``, ``gpu_indices: []``): one ended between the two calls. Not
    scontrol's final state: that comes, with sacct's exit code and reason, next time
    (a watcher would otherwise close the job on half a record)."""
    if job.state == "RUNNING" and later.state not in ("", "RUNNING", "SUSPENDED"):
        job.state = "COMPLETING"


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


def parse_job_id(stdout: str) -> str:
    """``sbatch --parsable`` prints ``JOBID`` or ``JOBID;CLUSTER``."""
    first = stdout.strip().splitlines()[0] if stdout.strip() else ""
    jid = first.split(";")[0].strip()
    from acbslurm.jobrecord import JOB_ID  # here: a status without records needs none of it

    if not JOB_ID.match(jid):  # the caller turns it into a SlurmError with sbatch's output
        raise ValueError(f"sbatch printed no job id: {stdout!r}")
    return jid


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
        return _pyslurm_submit(script, count, cwd)

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

    from concurrent.futures import ThreadPoolExecutor

    result = SubmitResult([], requested=count)
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, count))) as pool:
        _collect_ids([pool.submit(one, i) for i in range(count)], result)
    result.job_ids.sort(key=lambda j: [int(p) for p in j.split("_")])
    return result


def _collect_ids(futures: list[Future[str]], result: SubmitResult) -> None:
    """The ids of the sbatch calls into ``result``, in order; the first failure cancels
    the calls not started yet."""
    from concurrent.futures import CancelledError

    for fut in futures:
        try:
            result.job_ids.append(fut.result())
        except CancelledError:
            continue  # never started: counted as not attempted
        except SlurmError as exc:
            result.failed += 1
            result.error = result.error or exc
            for other in futures:
                other.cancel()  # calls already running still finish: their ids count


def _pyslurm_submit(script: str, count: int, cwd: str | None) -> SubmitResult:
    from acbslurm.slurm import pyslurm_backend

    return pyslurm_backend.submit_script(script, count=count, cwd=cwd)


@frozen
class CancelOutcome:
    """What ``cancel_known`` did: the ids it cancelled, the ones that had already ended
    (with their tasks' end states), the ones Slurm does not know."""

    cancelled: list[str]
    ended: dict[str, list[str]]
    unknown: list[str]
    unknown_rows: list[JobInfo]  # the UNKNOWN rows of ``unknown`` (their reasons)


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
    unknown, ended, live = _by_liveness(ids, rows)
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


def _by_liveness(
    ids: list[str], rows: Mapping[str, list[JobInfo]]
) -> tuple[list[str], list[str], list[str]]:
    """``ids`` split into the ones Slurm does not know, the ended ones and the live ones
    (by their rows: an array's tasks together)."""
    unknown: list[str] = []
    ended: list[str] = []
    live: list[str] = []
    for i in ids:
        if all(j.state == "UNKNOWN" for j in rows[i]):
            unknown.append(i)
        elif all(j.finished for j in rows[i]):
            ended.append(i)
        else:
            live.append(i)
    return unknown, ended, live


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
    import time

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
