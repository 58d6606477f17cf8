"""Which of the job's GPUs belong to the step and task a process runs in.

The job record holds every GPU Slurm gave the job on this node; a step (``srun
--exact --gres=gpu:1``) or a task (``--gpus-per-task``, ``--gpu-bind``) may have only
some of them. What Slurm 22.05 and later set in a task's environment:

- the batch script (no ``SLURM_STEP_ID``): ``SLURM_JOB_GPUS`` and
  ``CUDA_VISIBLE_DEVICES``, the job's GPUs, and no ``SLURM_STEP_GPUS``;
- a step's task: ``SLURM_STEP_GPUS``, the absolute gres indices of this task's GPUs
  (per task under ``--gpus-per-task`` and ``--gpu-bind``), ``CUDA_VISIBLE_DEVICES``
  and ``GPU_DEVICE_ORDINAL`` (relative to the step's GPUs where the cgroup plugin
  constrains devices, so not used here), and ``SLURM_JOB_GPUS`` of the whole job;
- a step without GPUs (``srun --gres=none``): no ``SLURM_STEP_GPUS`` at all.

The environment is the user's: it may narrow the record's set, never widen it. An
index or UUID in ``SLURM_STEP_GPUS`` that the record lacks is refused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from acbslurm.errors import GpuMappingError
from acbslurm.gpu.mapping import comma_tokens, is_uuid
from acbslurm.jobrecord import JobRecord
from acbslurm.units import is_ascii_int


class NotTheJobsGpu(GpuMappingError):
    """SLURM_STEP_GPUS names a GPU the job's record does not hold (or is malformed)."""


def _positions(tokens: list[str], rec: JobRecord, raw: str) -> list[int]:
    """Where each token of ``SLURM_STEP_GPUS`` is in the record (refusing the others)."""
    by_uuid = {u: i for i, u in enumerate(rec.gpu_uuids)}
    by_index = {str(x): i for i, x in enumerate(rec.gpu_indices)}
    has = ",".join(str(x) for x in rec.gpu_indices) or ",".join(rec.gpu_uuids) or "no GPUs"
    out: list[int] = []
    for t in tokens:
        pos = by_uuid.get(t) if is_uuid(t) else _index_position(t, by_index, raw)
        if pos is None:
            raise NotTheJobsGpu(
                f"SLURM_STEP_GPUS={raw} names GPU {t}, which Slurm did not give job "
                f"{rec.job_id} on this node (it has: {has})",
            )
        if pos in out:
            raise NotTheJobsGpu(f"SLURM_STEP_GPUS={raw} names GPU {t} twice")
        out.append(pos)
    return out


def _index_position(t: str, by_index: dict[str, int], raw: str) -> int | None:
    """Where GPU index ``t`` is in the record (None: not there)."""
    if not is_ascii_int(t):
        raise NotTheJobsGpu(f"SLURM_STEP_GPUS={raw}: {t!r} is not a GPU index")
    return by_index.get(str(int(t)))


def step_record(rec: JobRecord | None, env: Mapping[str, str]) -> JobRecord | None:
    """``rec`` narrowed to the GPUs of this step's task (``rec`` itself in the batch
    script, where ``SLURM_STEP_ID`` is unset)."""
    if rec is None or "SLURM_STEP_ID" not in env:
        return rec
    raw = env.get("SLURM_STEP_GPUS", "")
    positions = _positions(comma_tokens(raw), rec, raw)
    indices = [rec.gpu_indices[p] for p in positions] if rec.gpu_indices else []
    minors = [rec.gpu_minors[p] for p in positions if p < len(rec.gpu_minors)]
    return dataclasses.replace(
        rec,
        gpu_indices=indices,
        gpu_uuids=[rec.gpu_uuids[p] for p in positions],
        gpu_minors=minors,
    )
