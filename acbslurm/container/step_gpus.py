"""`acbslurm run` in a step or task: its GPUs (``gpu/steps.py``: SLURM_STEP_GPUS narrows
the job record, never widens it); its rank in the container: ``job_env.py``."""

from __future__ import annotations

from collections.abc import Mapping

from acbslurm.container.options import OptionError
from acbslurm.gpu.steps import NotTheJobsGpu, record_device_files
from acbslurm.gpu.steps import step_record as _step_record
from acbslurm.jobrecord import JobRecord


def step_record(
    rec: JobRecord | None, env: Mapping[str, str], inventory: str = ""
) -> JobRecord | None:
    """``gpu.steps.step_record``; a GPU the job lacks is a bad ``--gpus`` (exit 2).
    ``inventory``: the static GPU inventory setting, to find the GPUs' device files."""
    files = (
        record_device_files(rec, inventory) if rec is not None and "SLURM_STEP_ID" in env else []
    )
    try:
        return _step_record(rec, env, files)
    except NotTheJobsGpu as exc:
        raise OptionError("--gpus", str(exc)) from None
