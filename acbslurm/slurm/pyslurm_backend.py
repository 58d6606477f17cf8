"""submit and cancel through pyslurm (libslurm in-process), with the CLI's results.

The same ``SubmitResult`` as ``jobs.submit_script``: ids in order, the first error as a
``SlurmError`` carrying what sbatch would have printed (``sbatch: error: Batch job
submission failed: <Slurm's reason>``), no further submissions after a failure. Only
for the calling user with its own environment (sbatch's ``--export=ALL``): submitting
as another user or with another environment stays on the CLI.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from acbslurm.errors import SlurmError

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
        if attr is None:
            raise ValueError(
                f"the pyslurm backend does not read '#SBATCH {flag}' (slurm_backend: cli does)"
            )
        text = _unquote(value.strip())
        attrs[attr] = int(text) if attr in _INT_ATTRS else text
    return attrs


def submit_script(script: str, *, count: int = 1, cwd: str | None = None) -> Any:
    """Submit ``script`` ``count`` times; a ``jobs.SubmitResult``."""
    import os

    from acbslurm.slurm.jobs import SubmitResult

    if count < 1:
        raise ValueError("count must be at least 1")
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
