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


def submit_script(script: str, *, count: int = 1, cwd: str | None = None) -> Any:
    """Submit ``script`` ``count`` times; a ``jobs.SubmitResult``."""
    import os

    from acbslurm.slurm.jobs import SubmitResult

    if count < 1:
        raise ValueError("count must be at least 1")
    pyslurm = _pyslurm()
    result = SubmitResult([], requested=count)
    try:
        desc = pyslurm.JobSubmitDescription(script=script, working_directory=cwd or os.getcwd())
        desc.load_sbatch_options()  # the #SBATCH lines, as sbatch reads them
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
