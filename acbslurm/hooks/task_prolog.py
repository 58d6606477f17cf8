"""Slurm's TaskProlog (``acbslurm-task-prolog``, ``acbslurm task-prolog``): runs as the
job's user before each task.

Its stdout's ``export`` lines go into the task's environment: ACBSLURM_GPU_UUIDS, the
GPUs of this task (its step's SLURM_STEP_GPUS, gpu/steps.py), as `acbslurm run` gives
its container; the job's in the batch script. ``print`` lines reach the task's output.
It always exits 0: a failure is said there and in syslog.
"""

from __future__ import annotations

from collections.abc import Mapping

from acbslurm.config import load_settings
from acbslurm.errors import AcbslurmError
from acbslurm.gpu.steps import NotTheJobsGpu, record_device_files, step_record
from acbslurm.hooks.common import to_syslog, with_deadline
from acbslurm.jobrecord import check_job_id, read_record


def task_prolog_main() -> int:
    return with_deadline("task-prolog", run_task_prolog, 0)


def run_task_prolog(env: Mapping[str, str]) -> int:
    try:
        job_id = check_job_id(env.get("SLURM_JOB_ID", ""))
        settings = load_settings()
        rec = read_record(settings.record_dir, job_id)
    except AcbslurmError as exc:
        print(f"print acbslurm: {exc}")
        to_syslog("warning", str(exc))
        return 0
    if rec is None:
        msg = f"no job record for job {job_id}: is the acbslurm prolog set up?"
        print(f"print acbslurm: {msg}")
        to_syslog("warning", msg)
        return 0
    files = record_device_files(rec, settings.gpu_inventory) if "SLURM_STEP_ID" in env else []
    try:
        narrowed = step_record(rec, env, files)
    except NotTheJobsGpu as exc:  # said; `acbslurm run` refuses it the same way
        print(f"print acbslurm: {exc}")
        narrowed = None
    print(f"export ACBSLURM_GPU_UUIDS={','.join(narrowed.uuids if narrowed else [])}")
    return 0
