"""`acbslurm run` in a step or task: its GPUs (``gpu/steps.py``: SLURM_STEP_GPUS narrows
the job record, never widens it) and its rank in the container."""

from __future__ import annotations

from collections.abc import Mapping

from acbslurm.container.options import OptionError
from acbslurm.gpu.steps import NotTheJobsGpu
from acbslurm.gpu.steps import step_record as _step_record
from acbslurm.jobrecord import JobRecord

# What a container learns of its place in the job (its rank): copied from the task's
# environment unless the user set the name with --env.
RANK_VARIABLES = (
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "SLURM_NTASKS",
    "SLURM_ARRAY_JOB_ID",
    "SLURM_ARRAY_TASK_ID",
)


def rank_env(env: Mapping[str, str], given: Mapping[str, str]) -> dict[str, str]:
    """The task's rank variables for its container, the user's ``--env`` ones winning."""
    out = {k: env[k] for k in RANK_VARIABLES if k in env and k not in given}
    out.update(given)
    return out


def step_record(
    rec: JobRecord | None, env: Mapping[str, str], inventory: str = ""
) -> JobRecord | None:
    """``gpu.steps.step_record``; a GPU the job lacks is a bad ``--gpus`` (exit 2).
    ``inventory``: the static GPU inventory setting, to find the GPUs' device files."""
    from acbslurm.gpu.steps import record_device_files

    files = (
        record_device_files(rec, inventory) if rec is not None and "SLURM_STEP_ID" in env else []
    )
    try:
        return _step_record(rec, env, files)
    except NotTheJobsGpu as exc:
        raise OptionError("--gpus", str(exc)) from None
