"""submit, status, the watcher and cancel through pyslurm (libslurm in-process), with
the CLI's results.

The same ``SubmitResult`` as ``jobs.submit_script``: ids in order, the first error as a
``SlurmError`` carrying what sbatch would have printed (``sbatch: error: Batch job
submission failed: <Slurm's reason>``), no further submissions after a failure. Only
for the calling user with its own environment (sbatch's ``--export=ALL``): submitting
as another user or with another environment stays on the CLI.

``controller_jobs`` is squeue's and scontrol's part of ``jobs.query_jobs``: the same
``JobInfo`` rows squeue would give, plus each running job's GPU indices (scontrol's
``IDX``) from the same load, so a watcher costs one in-process RPC a poll instead of a
squeue and an scontrol per new job. Jobs the controller forgot still come from sacct.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

from acbslurm.errors import ConfigError, SlurmError
from acbslurm.gpuvalue import Gpu
from acbslurm.slurm.jobtypes import JobGres, JobInfo, SubmitResult
from acbslurm.slurm.states import HOLDING_STATES, TERMINAL_STATES
from acbslurm.units import expand_ranges

SUBMIT_ARGV = ["pyslurm", "JobSubmitDescription.submit"]


def _pyslurm() -> Any:
    import pyslurm  # a readable slurm.conf was checked first (backend.pyslurm_problem)

    return pyslurm


def _error(argv: list[str], exc: Exception, prefix: str) -> SlurmError:
    text = str(exc).strip() or type(exc).__name__
    return SlurmError(argv, 1, "", f"{prefix}{text}\n", reason=f"exited with code 1: {text}")


# #SBATCH options of templates/sbatch.sh.j2 -> JobSubmitDescription attributes. pyslurm
# 25.11.2's own #SBATCH reader (load_sbatch_options) reads only files and sets an
# attribute that does not exist for --partition, so acbslurm reads the lines itself.
SBATCH_ATTRS = {
    "--job-name": "name",
    "--partition": "partitions",
    "--account": "account",
    "--nodes": "nodes",
    "--ntasks": "ntasks",
    "--ntasks-per-node": "ntasks_per_node",
    "--cpus-per-task": "cpus_per_task",
    "--mem": "memory_per_node",
    "--gres": "gres_per_node",
    "--time": "time_limit",
    "--output": "standard_output",
    "--error": "standard_error",
    "--array": "array",
    "--dependency": "dependencies",
    "--chdir": "working_directory",
}
_INT_ATTRS = {"ntasks", "ntasks_per_node", "cpus_per_task"}


def _unquote(value: str) -> str:
    """A value as sbatch reads it: inside double quotes ``\\`` escapes the next char."""
    if not value.startswith('"'):
        return value.split("#", 1)[0].strip()
    out, i = [], 1
    while i < len(value) and value[i] != '"':
        if value[i] == "\\" and i + 1 < len(value):
            i += 1
        out.append(value[i])
        i += 1
    return "".join(out)


def sbatch_directives(script: str) -> dict[str, Any]:
    """The #SBATCH options of ``script`` (up to its first command, as sbatch reads them)
    as JobSubmitDescription attributes; ValueError for an option not mapped here."""
    attrs: dict[str, Any] = {}
    for raw in script.splitlines()[1:]:
        line = raw.strip()
        if line and not line.startswith("#"):
            break
        if not line.startswith("#SBATCH"):
            continue
        flag, _, value = line.removeprefix("#SBATCH").strip().partition("=")
        attr = SBATCH_ATTRS.get(flag)
        if attr is None:  # a spec's sbatch_args can ask for it: the user's to change
            raise ConfigError(
                f"the pyslurm backend does not read '#SBATCH {flag}' (slurm_backend: cli does)"
            )
        text = _unquote(value.strip())
        attrs[attr] = int(text) if attr in _INT_ATTRS else text
    return attrs


def submit_script(script: str, *, count: int = 1, cwd: str | None = None) -> SubmitResult:
    """Submit ``script`` ``count`` times."""
    if count < 1:
        raise ConfigError(f"a submission of {count} jobs: count must be at least 1")
    pyslurm = _pyslurm()
    result = SubmitResult([], requested=count)
    try:
        workdir = cwd or os.getcwd()
        # sbatch's --export=ALL and the two variables sbatch itself adds; pyslurm's own
        # "ALL" gave slurmctld an empty environment ("batch job cannot run without an
        # environment").
        environment = {
            **os.environ,
            "SLURM_SUBMIT_DIR": workdir,
            "SLURM_SUBMIT_HOST": os.uname().nodename,
        }
        attrs = {
            "working_directory": workdir,
            "environment": environment,
            **sbatch_directives(script),
        }
        desc = pyslurm.JobSubmitDescription(script=script, **attrs)
    except (ValueError, TypeError) as exc:
        result.failed, result.error = 1, _error(SUBMIT_ARGV, exc, "sbatch: error: ")
        return result
    for _ in range(count):
        try:
            result.job_ids.append(str(desc.submit()))
        except (pyslurm.RPCError, ValueError) as exc:
            result.failed = 1
            prefix = "sbatch: error: Batch job submission failed: "
            result.error = _error(SUBMIT_ARGV, exc, prefix)
            break
    return result


def cancel_jobs(job_ids: Sequence[str]) -> None:
    """Cancel plain job ids (an array's own id cancels all its tasks, as scancel does;
    pyslurm's Job takes no task ids: ``jobs.cancel_jobs`` sends those to scancel)."""
    pyslurm = _pyslurm()
    for jid in job_ids:
        try:
            pyslurm.Job(int(jid)).cancel()
        except pyslurm.RPCError as exc:
            raise _error(["pyslurm", "Job.cancel", jid], exc, "scancel: error: ") from None


def squeue_elapsed(seconds: int) -> str:
    """squeue's ``%M``: ``M:SS``, ``H:MM:SS`` or ``D-HH:MM:SS``."""
    days, rest = divmod(max(seconds, 0), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


def _local(unix: int | None) -> str:
    """A Slurm time as squeue prints it: the host's local time, no offset."""
    if not unix:
        return ""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(unix))


def display_id(job: Any) -> str:
    """The id squeue shows: ``12``, ``12_3`` for a task, ``12_[4-9]`` for the pending rest.

    pyslurm gives task id 0 as None (its "no value"), so a record of an array that is
    neither the pending rest nor a numbered task is task 0.
    """
    if job.array_id is None:
        return str(job.id)
    if job.array_tasks_waiting:
        return f"{job.array_id}_[{job.array_tasks_waiting}]"
    return f"{job.array_id}_{job.array_task_id or 0}"


def job_gpus(job: Any) -> list[Gpu]:
    """The GPUs of a running job on each of its nodes (scontrol's ``GRES=gpu(IDX:..)``),
    without UUIDs (the job's records add those)."""
    out: list[Gpu] = []
    for node, layout in (job.get_resource_layout_per_node() or {}).items():
        found: set[int] = set()
        for name, gres in (layout.get("gres") or {}).items():
            if name.split(":", 1)[0] == "gpu" and gres.get("indexes"):
                found.update(expand_ranges(str(gres["indexes"])))
        out += [Gpu("", i, node=str(node)) for i in sorted(found)]
    return out


# complexity: one field per line; each `or ""` and conditional is that field's default,
# read on its own line, and a helper per field would only move them out of sight.
def job_info(job: Any) -> JobInfo:
    """One pyslurm Job as the ``JobInfo`` squeue's row would give."""
    state = str(job.state)
    reason = str(job.state_reason or "")
    finished = state in TERMINAL_STATES
    return JobInfo(
        job_id=display_id(job),
        state=state,
        name=job.name or "",
        user=job.user_name or "",
        reason="" if reason in ("None", "(null)") else reason,
        elapsed=squeue_elapsed(int(job.run_time or 0)),
        node=job.allocated_nodes or "",
        submit_time=_local(job.submit_time),
        start_time=_local(job.start_time) if state != "PENDING" else "",
        end_time=_local(job.end_time) if finished else "",
        # squeue has no exit code (sacct had to be asked); the controller has it.
        exit_code=f"{job.exit_code or 0}:{job.exit_code_signal or 0}" if finished else "",
        partition=job.partition or "",
        work_dir=job.working_directory or "",
    )


def _wanted(job: Any, wanted: set[str], user: str | None) -> bool:
    if user and job.user_name != user:
        return False
    if not wanted:
        return True
    ids = {str(job.id), display_id(job)}
    if job.array_id is not None:
        ids.add(str(job.array_id))  # an array's own id stands for all its tasks
    return bool(ids & wanted)


# squeue's default sort "P,t,-p": partition, state (by Slurm's job_state number), then
# priority, highest first.
_STATE_ORDER = {"PENDING": 0, "RUNNING": 1, "SUSPENDED": 2}


def _load(wanted: list[str]) -> list[Any]:
    """The controller's records for ``wanted``: one job's alone when one plain id is
    asked (squeue does the same), else the job table (as squeue with several ids)."""
    pyslurm = _pyslurm()
    if len(wanted) == 1 and wanted[0].isdigit() and wanted[0].isascii():
        try:
            one = pyslurm.Job.load(int(wanted[0]))
        except pyslurm.RPCError as exc:
            if "invalid job id" in str(exc).lower():
                return []  # forgotten: sacct answers for it
            raise
        if one.array_id is None:
            return [one]
        # An array: slurm_load_job returns all its records, pyslurm keeps the first.
    try:
        return list(pyslurm.Jobs.load().values())
    except pyslurm.RPCError as exc:
        raise _error(["pyslurm", "Jobs.load"], exc, "squeue: error: ") from None


def controller_jobs(
    wanted: Sequence[str], user: str | None
) -> tuple[list[JobInfo], dict[str, JobGres]]:
    """squeue's rows for ``wanted`` (or all of ``user``'s / everyone's) and the GPUs of
    the running ones as ``JobGres`` keyed by the row's id."""

    want = set(wanted)
    rows: list[JobInfo] = []
    gres: dict[str, JobGres] = {}
    loaded = _load(list(wanted))
    if not want:  # a listing: in squeue's default order (a stable sort, as squeue's)
        loaded.sort(
            key=lambda j: (
                j.partition or "",
                _STATE_ORDER.get(str(j.state), 3),
                -int(j.priority or 0),
            )
        )
    for job in loaded:
        if not _wanted(job, want, user):
            continue
        info = job_info(job)
        if not want and info.finished:
            continue  # squeue without ids lists what is queued or running, as here
        rows.append(info)
        if info.state in HOLDING_STATES:
            gpus = job_gpus(job)
            if gpus:
                gres[info.job_id] = JobGres(str(job.id), gpus)
    return rows, gres
