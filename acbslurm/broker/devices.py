"""Which devices a broker manages: a Slurm job's GPUs, NVML, the static inventory, or CPU.

Inside a Slurm job (``SLURM_JOB_ID`` set) the broker manages exactly the GPUs Slurm
gave the job, so one allocation can be shared by many programs and never grows:
``ACBSLURM_GPU_UUIDS`` (exported by acbslurm's task prolog) first, else
``SLURM_JOB_GPUS`` / ``CUDA_VISIBLE_DEVICES`` mapped by gpu/ as the prolog maps them
(GRES indices through gres.conf's device files to minor numbers to UUIDs).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from acbslurm.broker.core import Device
from acbslurm.config import Settings, this_node
from acbslurm.errors import ConfigError, GpuMappingError, SetupError
from acbslurm.gpu.inventory import GpuInfo, load_static
from acbslurm.gpu.mapping import comma_tokens
from acbslurm.gpu.node import job_gpus
from acbslurm.gpu.nvml import nvml_inventory
from acbslurm.slurm.jobgpus import job_gpus_by_node
from acbslurm.units import cpu_device_spec
from acbslurm.values import frozen, replace


@frozen
class DeviceSet:
    devices: list[Device]
    source: str  # human-readable origin, shown by `broker status`


def from_gpu_info(gpus: list[GpuInfo]) -> list[Device]:
    return [Device(g.uuid, g.name, g.memory_total, g.minor, g.index) for g in gpus]


def cpu_devices(spec: str) -> list[Device]:
    """``cpu:N[:SIZE]``: N stand-in devices backed by host memory (tests, CPU-only nodes)."""
    try:
        count, memory = cpu_device_spec(spec)
    except ValueError as exc:
        raise ConfigError(f"device spec {spec!r}: {exc}") from None
    return [Device(f"cpu{i}", "CPU stand-in", memory, None, i) for i in range(count)]


def slurm_job_gpus(env: Mapping[str, str], settings: Settings) -> list[Device]:
    """The GPUs of the Slurm job described by ``env``, in Slurm's order: the ones
    acbslurm's task prolog exported, else mapped as its prolog maps them (gpu/node.py),
    so a broker in a job lends exactly the GPUs the hooks recorded for it."""
    uuids = comma_tokens(env.get("ACBSLURM_GPU_UUIDS", ""))
    if uuids:
        # The task prolog already mapped them; a static inventory adds names and sizes.
        known = load_static(settings.gpu_inventory) if settings.gpu_inventory else []
        by_uuid = {d.id: d for d in from_gpu_info(known)}
        return [by_uuid.get(u) or Device(u) for u in uuids]
    gpus = list(job_gpus(env, settings).info)
    if not gpus:
        raise GpuMappingError(
            f"job {env.get('SLURM_JOB_ID', '?')} has no GPUs (no ACBSLURM_GPU_UUIDS, "
            "SLURM_JOB_GPUS or CUDA_VISIBLE_DEVICES); request GPUs with --gres=gpu:N "
            "or use --devices"
        )
    return from_gpu_info(gpus)


def _slurm_job_devices(env: Mapping[str, str], settings: Settings) -> DeviceSet:
    """The GPUs of the Slurm job this broker runs in (``--devices slurm``)."""
    if not env.get("SLURM_JOB_ID"):
        raise ConfigError("--devices slurm: not inside a Slurm job (SLURM_JOB_ID unset)")
    return DeviceSet(slurm_job_gpus(env, settings), f"Slurm job {env['SLURM_JOB_ID']}")


def job_nodes_count(env: Mapping[str, str]) -> int:
    """``SLURM_JOB_NUM_NODES`` (1 outside a job or when unreadable)."""
    raw = env.get("SLURM_JOB_NUM_NODES", "1")
    return int(raw) if raw.isascii() and raw.isdigit() and int(raw) > 0 else 1


# complexity: the count is the comprehension's choice (this node's device, or one built from the
# comment) and the check that none of this node's is missing, both over the same maps; nothing in it
# is reused.
def all_nodes_devices(env: Mapping[str, str], settings: Settings) -> DeviceSet:
    """Every GPU of the multi-node Slurm job this program runs in, in the job's node
    order, each with its node (for a broker that lends them all: the pool's).

    This node's GPUs come as for ``--devices slurm`` (names and sizes from NVML or the
    inventory); the other nodes' from the job's ``AdminComment``, where each node's
    prolog recorded them. Their names and sizes cannot be read from here: they are
    taken from this node's (a job's nodes share one GPU type, its ``--gres``), the
    smallest size if this node's differ.
    """
    mine = _slurm_job_devices(env, settings).devices
    here = this_node(env)
    job = env["SLURM_JOB_ID"]
    gpus = job_gpus_by_node(job, bin_dir=settings.slurm_bin_dir)
    # This node's as ``mine`` has them; the others' with this node's name, smallest size.
    by_uuid = {d.id: d for d in mine}
    name = mine[0].name if mine else ""
    size = min((d.memory_total for d in mine), default=0)
    out = [
        replace(by_uuid[g.uuid], node=g.node)
        if g.uuid in by_uuid
        else Device(g.uuid, name, size, None, g.index, g.node)
        for g in gpus
    ]
    lost = [d.id for d in mine if d.id not in {g.uuid for g in gpus}]
    if lost:
        raise GpuMappingError(
            f"job {job}: this node's GPUs {', '.join(lost)} are not in the job's "
            f"AdminComment for node {here}"
        )
    nodes = list(dict.fromkeys(d.node for d in out))
    return DeviceSet(out, f"Slurm job {job} on {len(nodes)} nodes: {','.join(nodes)}")


# complexity: a dispatcher: one branch per --devices source, in the order "auto" tries
# them (a Slurm job, the inventory, NVML), each with its own error.
def resolve_devices(
    spec: str, env: Mapping[str, str] | None = None, settings: Settings | None = None
) -> DeviceSet:
    """Devices for ``broker serve --devices SPEC``.

    ``auto``: the Slurm job's GPUs inside a job, else the static inventory when
    configured, else NVML. ``inventory``/``nvml``/``slurm`` force one source;
    ``cpu:N[:SIZE]`` makes CPU stand-ins.
    """
    env = os.environ if env is None else env
    settings = Settings() if settings is None else settings
    if spec.startswith("cpu"):
        return DeviceSet(cpu_devices(spec), f"{spec} (CPU stand-ins)")
    if spec not in ("auto", "inventory", "nvml", "slurm"):
        raise ConfigError(
            f"device spec {spec!r}: expected auto, slurm, inventory, nvml or cpu:N[:SIZE]"
        )

    if spec == "slurm" or (spec == "auto" and env.get("SLURM_JOB_ID")):
        return _slurm_job_devices(env, settings)
    inventory = settings.gpu_inventory
    if spec == "inventory" or (spec == "auto" and inventory):
        if not inventory:
            raise ConfigError("--devices inventory: no gpu_inventory configured")
        return DeviceSet(from_gpu_info(load_static(inventory)), f"inventory {inventory}")
    gpus = nvml_inventory(include_mig=False)
    if not gpus:
        raise SetupError("NVML reports no GPUs on this node; use --devices cpu:N to test")
    return DeviceSet(from_gpu_info(gpus), "NVML")
