"""Slurm's job listings read into records: squeue's, sacct's and ``scontrol -d -o
show job``'s text, the order every listing shows jobs in, and sbatch's job id.

Pure functions of the text, and the fields asked for; ``jobs.py`` runs the commands.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator

from acbslurm.errors import ConfigError
from acbslurm.gpuvalue import Gpu
from acbslurm.slurm.gpu_history import PREFIX
from acbslurm.slurm.hostlist import expand_hostlist
from acbslurm.slurm.jobtypes import JobGres, JobInfo
from acbslurm.slurm.states import TERMINAL_STATES
from acbslurm.units import expand_ranges

# squeue's fields (``-O``: each printed whole, then its separator), all a status needs in
# one request. The AdminComment carries the GPUs the job's prologs wrote (``gpu_history``),
# so a running job's GPUs come without an scontrol call or listing; the working
# directory is where a running job keeps its pool's address and published ports. Those
# two and the name may hold '|': they come last, the comment and the directory each
# ended by a unit separator (0x1f) and split at the first one, so neither a directory
# nor a name (a user's text) reaches the comment (an admin's). JobID is the job's own
# id (an array task's, the one its record is named by), JobArrayID squeue's (12_1).
SQUEUE_FIELDS = (
    "JobArrayID",
    "JobID",
    "State",
    "Reason",
    "TimeUsed",
    "NodeList",
    "UserName",
    "SubmitTime",
    "StartTime",
    "EndTime",
    "Partition",
)
SQUEUE_FORMAT = (
    ",".join(f"{name}:|" for name in SQUEUE_FIELDS) + ",admin_comment:\x1f,WorkDir:\x1f,Name:"
)
SACCT_FIELDS = (
    "JobID,State,Elapsed,NodeList,User,Submit,Start,End,ExitCode,Partition,Reason,JobName"
)
OOM = "OUT_OF_MEMORY"
_IDX = re.compile(r"IDX:([0-9,\-]+)")
_GRES = re.compile(r"\bGRES=(\S+)")
_ARRAY_JOB = re.compile(r"\bArrayJobId=([0-9]+)")
_ARRAY_TASK = re.compile(r"\bArrayTaskId=([0-9]+)(?=\s|$)")  # one task, not 2-3 or 2,5
_JOB_STATE = re.compile(r"\bJobState=([A-Z_]+)")
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
            import logging  # only for a line Slurm printed that was not expected

            logging.getLogger(__name__).warning("unexpected %s line: %r", command, line)
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


# complexity: one pass over squeue's rows: each field's clean-up (Slurm's "(null)", "None", "n/a")
# sits where the field is named, and the comment's GPUs are read in the same pass; split, a field's
# rule would sit away from its name.
def parse_squeue_gpus(text: str) -> tuple[list[JobInfo], dict[str, JobGres]]:
    """``squeue -h -O SQUEUE_FORMAT``'s rows, and the GPUs of the running ones whose
    prologs all wrote theirs into the job's AdminComment (by squeue's id)."""
    jobs: list[JobInfo] = []
    recorded: dict[str, JobGres] = {}
    for parts in _rows(text, len(SQUEUE_FIELDS) + 1, "squeue"):
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
        jobs.append(job)
        if PREFIX in comment and job.state in _PROLOG_DONE_STATES and job.reason != "Prolog":
            gpus = _comment_gpus(comment, job.node)
            if gpus:
                recorded[job.job_id] = JobGres(own_id.strip(), gpus, job.state)
    return jobs, recorded


def _comment_gpus(comment: str, nodelist: str) -> list[Gpu]:
    """The GPUs in ``comment`` of the nodes of ``nodelist``, in its order; [] unless
    every node has its token and each GPU its index (the prolog of a node may not have
    written yet, or not at all: scontrol is asked then)."""
    from acbslurm.slurm.jobgpus import gpus_in_comment  # here: a status without GPUs needs none

    try:
        nodes = expand_hostlist(nodelist) if nodelist else []
    except ConfigError:  # squeue's node list not readable
        nodes = []
    gpus = gpus_in_comment(comment, nodes)
    on = {g.node for g in gpus}
    if not nodes or any(n not in on for n in nodes) or any(g.index is None for g in gpus):
        return []
    return gpus


def parse_sacct(text: str) -> list[JobInfo]:
    """Parse ``sacct -n -P [-X] --format=SACCT_FIELDS`` output: the jobs' rows; a
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


# complexity: the two ways a user's text can forge a GPU group (an unreadable host list, a node in
# two groups) are refused where they show, beside the one comprehension they guard.
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
    return [
        Gpu("", i, node=node)
        for node, segment in nodes
        # every GRES= of the node's segment, sorted, once each
        for i in sorted({i for gres in _GRES.findall(segment) for i in _gpu_indices(gres)})
    ]


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
    digits = re.match(r"\[?([0-9]+)", task)
    return (number, 1, int(digits.group(1)) if digits else 0, task)


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


def parse_job_id(stdout: str) -> str:
    """``sbatch --parsable`` prints ``JOBID`` or ``JOBID;CLUSTER``."""
    first = stdout.strip().splitlines()[0] if stdout.strip() else ""
    jid = first.split(";")[0].strip()
    from acbslurm.jobrecord import JOB_ID  # here: a status without records needs none of it

    if not JOB_ID.match(jid):  # the caller turns it into a SlurmError with sbatch's output
        raise ValueError(f"sbatch printed no job id: {stdout!r}")
    return jid
