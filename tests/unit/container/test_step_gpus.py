"""A container gets the GPUs of its step and task only (Slurm 22.05's variables, as the
sandbox shows them: tests/integration/test_job_gpus_exact.py)."""

from __future__ import annotations

import pytest

from acbslurm.container.options import GpuNotAllocated, OptionError, resolve_gpus
from acbslurm.container.step_gpus import step_record
from acbslurm.gpuvalue import Gpu, from_lists
from acbslurm.jobrecord import JobRecord

REC = JobRecord(
    job_id="12",
    user="u",
    uid=1000,
    node="vm",
    gpus=from_lists("vm", [0, 1, 3], ["GPU-a", "GPU-b", "GPU-d"], [0, 1, 3]),
)


def uuids(env: dict[str, str]) -> list[str]:
    return [g.uuid for g in resolve_gpus("auto", step_record(REC, env))]


def test_the_batch_script_gets_every_gpu_of_the_job() -> None:
    # No SLURM_STEP_ID: the batch step, whose GPUs are the job's (CUDA_VISIBLE_DEVICES
    # there is the job's too; it is never read).
    assert uuids({"SLURM_JOB_GPUS": "0,1,3", "CUDA_VISIBLE_DEVICES": "0"}) == REC.uuids


def test_a_step_or_task_gets_its_slurm_step_gpus_only() -> None:
    env = {"SLURM_STEP_ID": "1", "SLURM_STEP_GPUS": "3", "CUDA_VISIBLE_DEVICES": "0"}
    rec = step_record(REC, env)
    assert rec is not None
    assert rec.gpus == (Gpu("GPU-d", 3, 3, "vm"),)
    # --gpu-bind=map_gpu:1,0: Slurm's order is kept.
    assert uuids({"SLURM_STEP_ID": "0", "SLURM_STEP_GPUS": "1,0"}) == ["GPU-b", "GPU-a"]


def test_a_step_without_gpus_gets_none() -> None:
    # srun --gres=none: Slurm sets no SLURM_STEP_GPUS in the step.
    assert uuids({"SLURM_STEP_ID": "0", "SLURM_JOB_GPUS": "0,1,3"}) == []


def test_a_step_cannot_name_a_gpu_outside_the_record() -> None:
    with pytest.raises(
        OptionError,
        match=r"SLURM_STEP_GPUS=0,2 names GPU 2, which Slurm did "
        r"not give job 12 on this node \(it has: 0,1,3\)",
    ):
        uuids({"SLURM_STEP_ID": "0", "SLURM_STEP_GPUS": "0,2"})
    with pytest.raises(OptionError, match="'x' is not a GPU index"):
        uuids({"SLURM_STEP_ID": "0", "SLURM_STEP_GPUS": "x"})
    with pytest.raises(OptionError, match="names GPU 01 twice"):
        uuids({"SLURM_STEP_ID": "0", "SLURM_STEP_GPUS": "1,01"})


def test_uuids_in_slurm_step_gpus_must_be_the_records() -> None:
    assert uuids({"SLURM_STEP_ID": "0", "SLURM_STEP_GPUS": "GPU-b"}) == ["GPU-b"]
    with pytest.raises(OptionError, match="names GPU GPU-z"):
        uuids({"SLURM_STEP_ID": "0", "SLURM_STEP_GPUS": "GPU-z"})


def test_an_explicit_uuid_of_another_step_is_refused() -> None:
    rec = step_record(REC, {"SLURM_STEP_ID": "0", "SLURM_STEP_GPUS": "0"})
    with pytest.raises(GpuNotAllocated, match="GPU GPU-b was not given"):
        resolve_gpus(["GPU-b"], rec)


def test_no_record_stays_none() -> None:
    assert step_record(None, {"SLURM_STEP_ID": "0", "SLURM_STEP_GPUS": "0"}) is None
