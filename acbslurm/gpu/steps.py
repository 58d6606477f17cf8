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

Under ``--gpus-per-task`` or ``--gpu-bind`` with ``ConstrainDevices=yes`` a task's
``SLURM_STEP_GPUS`` counts within the GPUs its device cgroup lets it open (rank 1 with
GPU 1 alone is told ``0``; seen on 22.05 and 25.11), while a step's counts absolutely.
So where the record's device files are known, the one the task may open decide: read
absolutely when every GPU named so can be opened, else as positions among those that
can (Slurm numbers them in index order, the record's).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping, Sequence

from acbslurm.errors import GpuMappingError
from acbslurm.gpu.inventory import load_static
from acbslurm.gpu.mapping import comma_tokens, is_uuid
from acbslurm.gpuvalue import minors as known_minors
from acbslurm.jobrecord import JobRecord
from acbslurm.units import is_ascii_int
from acbslurm.values import replace


class NotTheJobsGpu(GpuMappingError):
    """SLURM_STEP_GPUS names a GPU the job's record does not hold (or is malformed)."""


def _positions(tokens: list[str], rec: JobRecord, raw: str) -> list[int]:
    """Where each token of ``SLURM_STEP_GPUS`` is in the record (refusing the others)."""
    by_uuid = {g.uuid: i for i, g in enumerate(rec.gpus)}
    by_index = {str(g.index): i for i, g in enumerate(rec.gpus) if g.index is not None}
    has = _names(rec)
    out: list[int] = []
    for t in tokens:
        if not is_uuid(t) and not is_ascii_int(t):
            raise NotTheJobsGpu(f"SLURM_STEP_GPUS={raw}: {t!r} is not a GPU index")
        pos = by_uuid.get(t) if is_uuid(t) else by_index.get(str(int(t)))
        if pos is None:
            raise NotTheJobsGpu(
                f"SLURM_STEP_GPUS={raw} names GPU {t}, which Slurm did not give job "
                f"{rec.job_id} on this node (it has: {has})",
            )
        if pos in out:
            raise NotTheJobsGpu(f"SLURM_STEP_GPUS={raw} names GPU {t} twice")
        out.append(pos)
    return out


def _names(rec: JobRecord) -> str:
    """The record's GPUs as Slurm named them: by index, else by UUID."""
    indices = [str(g.index) for g in rec.gpus if g.index is not None]
    return ",".join(indices) or ",".join(rec.uuids) or "no GPUs"


def can_open(path: str) -> bool:
    """May this process open the GPU device file ``path`` read-write? Refused (EPERM by
    the device cgroup, EACCES by the file's permissions) or not; an open that passes
    them is closed at once (ENXIO: an emulated GPU, no driver; ENOENT: not here)."""
    try:
        os.close(os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY))
    except OSError as exc:
        return exc.errno not in (errno.EPERM, errno.EACCES)
    return True


def _as_the_task_may_open(
    positions: list[int], tokens: list[str], device_files: Sequence[str], raw: str, rec: JobRecord
) -> list[int]:
    """``positions`` as they are when every GPU so named opens; else ``tokens`` read as
    positions among the GPUs this task may open (ConstrainDevices' numbering)."""
    if len(device_files) != len(rec.gpus) or all(can_open(device_files[p]) for p in positions):
        return positions
    if not all(is_ascii_int(t) for t in tokens):
        return positions
    allowed = [p for p, f in enumerate(device_files) if can_open(f)]
    out = []
    for t in tokens:
        if int(t) >= len(allowed):
            raise NotTheJobsGpu(
                f"SLURM_STEP_GPUS={raw}: this task may open {len(allowed)} of job "
                f"{rec.job_id}'s GPUs here, so {t!r} names none of them"
            )
        out.append(allowed[int(t)])
    return out


def step_record(
    rec: JobRecord | None, env: Mapping[str, str], device_files: Sequence[str] = ()
) -> JobRecord | None:
    """``rec`` narrowed to the GPUs of this step's task (``rec`` itself in the batch
    script, where ``SLURM_STEP_ID`` is unset). ``device_files``: the record's GPUs'
    device files, in its order, to tell a task's relative numbering (above)."""
    if rec is None or "SLURM_STEP_ID" not in env:
        return rec
    raw = env.get("SLURM_STEP_GPUS", "")
    tokens = comma_tokens(raw)
    positions = _positions(tokens, rec, raw)
    positions = _as_the_task_may_open(positions, tokens, device_files, raw, rec)
    return replace(rec, gpus=tuple(rec.gpus[p] for p in positions))


def record_device_files(rec: JobRecord, inventory: str) -> list[str]:
    """The device file of each of the record's GPUs: the static inventory's where it
    names one (the sandbox's emulated GPUs), else ``/dev/nvidia<minor>``; empty when the
    record pairs no minors with its GPUs."""
    if any(g.minor is None for g in rec.gpus):
        return []
    named: dict[int, str] = {}
    if inventory:
        try:
            named = {g.minor: g.device for g in load_static(inventory) if g.device}
        except (OSError, ValueError, GpuMappingError):
            named = {}
    return [named.get(m, f"/dev/nvidia{m}") for m in known_minors(rec.gpus)]
