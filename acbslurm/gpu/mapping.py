"""Slurm's GPU allocation -> GPU UUIDs, never by NVML index alone.

Path of one GPU: the index in SLURM_JOB_GPUS -> the gres.conf device file at that
position (Slurm's order) -> the file's minor number (from the device node itself) ->
the GPU with that minor number in the inventory -> its UUID. Newer Slurm puts UUIDs in
CUDA_VISIBLE_DEVICES (or SLURM_JOB_GPUS); those are accepted when the node has them.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Mapping, Sequence

from acbslurm.errors import GpuMappingError
from acbslurm.gpu.inventory import GpuInfo
from acbslurm.gpuvalue import Gpu
from acbslurm.units import is_ascii_int
from acbslurm.values import frozen

_UUID = re.compile(r"^(GPU|MIG)-[0-9A-Za-z][0-9A-Za-z/-]*$")


@frozen
class JobGpus:
    """The GPUs of one job on this node, in Slurm's order, and the inventory's entry of
    each (its name and memory, for a broker that lends them)."""

    gpus: tuple[Gpu, ...] = ()
    info: tuple[GpuInfo, ...] = ()

    @property
    def uuids(self) -> list[str]:
        return [g.uuid for g in self.gpus]


def _job_gpus(indices: list[int] | None, found: list[GpuInfo], node: str) -> JobGpus:
    """``found`` (the inventory's, in Slurm's order) as the job's GPUs; ``indices``:
    Slurm's, None where it named UUIDs."""
    gpus = tuple(
        Gpu(g.uuid, None if indices is None else indices[i], g.minor, node)
        for i, g in enumerate(found)
    )
    return JobGpus(gpus, tuple(found))


def device_minor(path: str) -> int:
    """The minor number of character device ``path``."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise GpuMappingError(f"GPU device file {path} (from gres.conf): {exc.strerror}") from None
    if not stat.S_ISCHR(st.st_mode):
        raise GpuMappingError(f"GPU device file {path} (from gres.conf) is not a character device")
    return os.minor(st.st_rdev)


def is_uuid(token: str) -> bool:
    return bool(_UUID.match(token))


def comma_tokens(value: str) -> list[str]:
    """The non-empty entries of a comma list such as ``SLURM_JOB_GPUS`` (spaces trimmed)."""
    return [t.strip() for t in value.split(",") if t.strip()]


def index_variable(env: Mapping[str, str]) -> str:
    """The variable with this process's GPU indices: the step's inside a step."""
    return "SLURM_STEP_GPUS" if "SLURM_STEP_GPUS" in env else "SLURM_JOB_GPUS"


def map_job_gpus(
    env: Mapping[str, str],
    devices: Sequence[str],
    inventory: Sequence[GpuInfo],
    minor_of: Callable[[str], int] = device_minor,
    node: str = "",
) -> JobGpus:
    """Map the job's allocation found in ``env`` (Slurm's prolog/job environment).

    In a step's task (``srun``, ``acbslurm gpus --from-env``) ``SLURM_STEP_GPUS``, the
    absolute indices of the task's GPUs, stands for ``SLURM_JOB_GPUS``: a bare ``srun``
    outside a batch job sets no ``SLURM_JOB_GPUS`` at all. The prolog has neither of
    the step's variables. ``node``: the node the GPUs are on, as each value names it."""
    source = index_variable(env)
    job_gpus = comma_tokens(env.get(source, ""))
    cvd = comma_tokens(env.get("CUDA_VISIBLE_DEVICES", ""))
    cvd_uuids = cvd if cvd and all(is_uuid(t) for t in cvd) else []

    if job_gpus and all(is_uuid(t) for t in job_gpus):
        result = _job_gpus(None, _by_uuid(job_gpus, inventory, source), node)
    elif job_gpus:
        indices = _indices(job_gpus, source)
        found = _by_index(indices, devices, inventory, minor_of, source)
        result = _job_gpus(indices, found, node)
    elif cvd_uuids:
        result = _job_gpus(None, _by_uuid(cvd_uuids, inventory, "CUDA_VISIBLE_DEVICES"), node)
    elif cvd:
        # Plain numbers in CUDA_VISIBLE_DEVICES are relative to the step: unusable alone.
        raise GpuMappingError(
            f"CUDA_VISIBLE_DEVICES={','.join(cvd)} holds indices but neither SLURM_JOB_GPUS "
            "nor SLURM_STEP_GPUS is set"
        )
    else:
        return JobGpus()
    _check_mapped(result, cvd_uuids)
    return result


def _indices(tokens: list[str], source: str) -> list[int]:
    """``source``'s GPU indices (``0,1``)."""
    indices = []
    for t in tokens:
        if not is_ascii_int(t):
            raise GpuMappingError(f"{source}: {t!r} is neither a GPU index nor a UUID")
        indices.append(int(t))
    return indices


def _check_mapped(result: JobGpus, cvd_uuids: list[str]) -> None:
    """The mapped GPUs are CUDA_VISIBLE_DEVICES' UUIDs (when it has them), none twice."""
    if cvd_uuids and set(cvd_uuids) != set(result.uuids):
        raise GpuMappingError(
            f"CUDA_VISIBLE_DEVICES ({','.join(cvd_uuids)}) disagrees with the mapped "
            f"GPUs ({','.join(result.uuids)})"
        )
    if len(set(result.uuids)) != len(result.uuids):
        raise GpuMappingError(f"the allocation names a GPU twice: {','.join(result.uuids)}")


def _by_uuid(uuids: list[str], inventory: Sequence[GpuInfo], source: str) -> list[GpuInfo]:
    known = {g.uuid: g for g in inventory}
    out = []
    for u in uuids:
        if u not in known:
            raise GpuMappingError(f"{source}: GPU {u} is not on this node")
        out.append(known[u])
    return out


def _by_index(
    indices: list[int],
    devices: Sequence[str],
    inventory: Sequence[GpuInfo],
    minor_of: Callable[[str], int],
    source: str = "SLURM_JOB_GPUS",
) -> list[GpuInfo]:
    # MIG devices share their parent's minor; only whole GPUs are mapped by minor.
    by_minor: dict[int, list[GpuInfo]] = {}
    for g in inventory:
        if g.uuid.startswith("GPU-"):
            by_minor.setdefault(g.minor, []).append(g)
    out = []
    for i in indices:
        if i >= len(devices):
            raise GpuMappingError(
                f"{source} names GPU index {i} but gres.conf lists only "
                f"{len(devices)} GPU device file(s) for this node"
            )
        path = devices[i]
        minor = minor_of(path)
        found = by_minor.get(minor, [])
        if len(found) != 1:
            what = "no GPU" if not found else f"{len(found)} GPUs"
            raise GpuMappingError(
                f"GPU index {i} -> {path} (minor {minor}): the inventory has {what} "
                "with that minor number"
            )
        out.append(found[0])
    return out
