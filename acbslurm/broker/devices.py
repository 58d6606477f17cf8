"""Which devices a broker manages: a Slurm job's GPUs, NVML, the static inventory, or CPU.

Inside a Slurm job (``SLURM_JOB_ID`` set) the broker manages exactly the GPUs Slurm
gave the job, so one allocation can be shared by many programs and never grows:
``ACBSLURM_GPU_UUIDS`` (exported by acbslurm's task prolog) first, else
``SLURM_JOB_GPUS`` / ``CUDA_VISIBLE_DEVICES`` mapped through the GPU inventory.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass

from acbslurm.broker.core import Device
from acbslurm.errors import ConfigError, GpuMappingError, SetupError
from acbslurm.gpu.inventory import GpuInfo, load_static
from acbslurm.units import ascii_int, size_bytes


@dataclass(frozen=True)
class DeviceSet:
    devices: list[Device]
    source: str  # human-readable origin, shown by `broker status`


def from_gpu_info(gpus: list[GpuInfo]) -> list[Device]:
    return [Device(g.uuid, g.name, g.memory_total, g.minor, g.index) for g in gpus]


def cpu_devices(spec: str) -> list[Device]:
    """``cpu:N[:SIZE]``: N stand-in devices backed by host memory (tests, CPU-only nodes)."""
    parts = spec.split(":")
    if parts[0] != "cpu" or len(parts) not in (2, 3):
        raise ConfigError(f"device spec {spec!r}: expected cpu:N or cpu:N:SIZE")
    try:
        count = ascii_int(parts[1])
    except ValueError:
        raise ConfigError(f"device spec {spec!r}: {parts[1]!r} is not a number") from None
    if count < 1:
        raise ConfigError(f"device spec {spec!r}: need at least one device")
    memory = 0
    if len(parts) == 3:
        try:
            memory = size_bytes(parts[2])
        except ValueError as exc:
            raise ConfigError(f"device spec {spec!r}: {exc}") from None
    return [Device(f"cpu{i}", "CPU stand-in", memory, -1, i) for i in range(count)]


def nvml_gpus() -> list[GpuInfo]:
    """The node's GPUs from NVML (pynvml is imported only here)."""
    try:
        import pynvml
    except ImportError:
        raise SetupError("NVML is not available: pip install nvidia-ml-py") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise SetupError(f"NVML cannot start ({exc}); is the NVIDIA driver loaded?") from None
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            uuid = pynvml.nvmlDeviceGetUUID(h)
            name = pynvml.nvmlDeviceGetName(h)
            minor = pynvml.nvmlDeviceGetMinorNumber(h)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h).total
            out.append(
                GpuInfo(
                    index=i,
                    minor=int(minor),
                    uuid=uuid if isinstance(uuid, str) else uuid.decode(),
                    name=name if isinstance(name, str) else name.decode(),
                    memory_total=int(mem),
                    device=f"/dev/nvidia{minor}",
                )
            )
        return out
    finally:
        pynvml.nvmlShutdown()


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def slurm_job_gpus(env: Mapping[str, str], inventory: list[GpuInfo] | None) -> list[GpuInfo]:
    """The GPUs of the Slurm job described by ``env``, in Slurm's order."""
    job = env.get("SLURM_JOB_ID", "?")
    by_uuid = {g.uuid: g for g in inventory or []}
    uuids = _split(env.get("ACBSLURM_GPU_UUIDS", ""))
    if uuids:
        # The task prolog already mapped them; the inventory only adds names and sizes.
        return [by_uuid.get(u) or GpuInfo(index=-1, minor=-1, uuid=u) for u in uuids]
    for var, key in (("SLURM_JOB_GPUS", "minor"), ("CUDA_VISIBLE_DEVICES", "index")):
        values = _split(env.get(var, ""))
        if not values:
            continue
        if all(v.startswith(("GPU-", "MIG-")) for v in values):
            return [by_uuid.get(v) or GpuInfo(index=-1, minor=-1, uuid=v) for v in values]
        if inventory is None:
            raise GpuMappingError(
                f"job {job}: {var}={env[var]} needs a GPU inventory to map to UUIDs "
                "(set gpu_inventory, or run the acbslurm task prolog)"
            )
        out = []
        for v in values:
            match = [g for g in inventory if str(getattr(g, key)) == v]
            if len(match) != 1:
                raise GpuMappingError(f"job {job}: {var} entry {v!r} is not a GPU {key} here")
            out.append(match[0])
        return out
    raise GpuMappingError(
        f"job {job} has no GPUs (no ACBSLURM_GPU_UUIDS, SLURM_JOB_GPUS or "
        "CUDA_VISIBLE_DEVICES); request GPUs with --gres=gpu:N or use --devices"
    )


def _slurm_job_devices(env: Mapping[str, str], gpu_inventory: str) -> DeviceSet:
    """The GPUs of the Slurm job this broker runs in (``--devices slurm``)."""
    if not env.get("SLURM_JOB_ID"):
        raise ConfigError("--devices slurm: not inside a Slurm job (SLURM_JOB_ID unset)")
    inv: list[GpuInfo] | None = None
    if gpu_inventory or not env.get("ACBSLURM_GPU_UUIDS"):
        try:
            inv = load_static(gpu_inventory) if gpu_inventory else nvml_gpus()
        except SetupError:
            inv = None
    gpus = slurm_job_gpus(env, inv)
    return DeviceSet(from_gpu_info(gpus), f"Slurm job {env['SLURM_JOB_ID']}")


def job_nodes_count(env: Mapping[str, str]) -> int:
    """``SLURM_JOB_NUM_NODES`` (1 outside a job or when unreadable)."""
    raw = env.get("SLURM_JOB_NUM_NODES", "1")
    return int(raw) if raw.isascii() and raw.isdigit() and int(raw) > 0 else 1


def all_nodes_devices(
    env: Mapping[str, str], gpu_inventory: str = "", bin_dir: str = ""
) -> DeviceSet:
    """Every GPU of the multi-node Slurm job this program runs in, in the job's node
    order, each with its node (for a broker that lends them all: the pool's).

    This node's GPUs come as for ``--devices slurm`` (names and sizes from NVML or the
    inventory); the other nodes' from the job's ``AdminComment``, where each node's
    prolog recorded them. Their names and sizes cannot be read from here: they are
    taken from this node's (a job's nodes share one GPU type, its ``--gres``), the
    smallest size if this node's differ.
    """
    from acbslurm.config import this_node
    from acbslurm.slurm.jobgpus import job_gpus_by_node

    mine = _slurm_job_devices(env, gpu_inventory).devices
    here = this_node(env)
    job = env["SLURM_JOB_ID"]
    gpus = job_gpus_by_node(job, bin_dir=bin_dir)
    by_uuid = {d.id: d for d in mine}
    name = mine[0].name if mine else ""
    size = min((d.memory_total for d in mine), default=0)
    out = [
        dataclasses.replace(by_uuid[g.uuid], node=g.node)
        if g.uuid in by_uuid
        else Device(g.uuid, name, size, -1, g.index, g.node)
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


def resolve_devices(
    spec: str, env: Mapping[str, str] | None = None, gpu_inventory: str = ""
) -> DeviceSet:
    """Devices for ``broker serve --devices SPEC``.

    ``auto``: the Slurm job's GPUs inside a job, else the static inventory when
    configured, else NVML. ``inventory``/``nvml``/``slurm`` force one source;
    ``cpu:N[:SIZE]`` makes CPU stand-ins.
    """
    env = os.environ if env is None else env
    if spec.startswith("cpu"):
        return DeviceSet(cpu_devices(spec), f"{spec} (CPU stand-ins)")
    if spec not in ("auto", "inventory", "nvml", "slurm"):
        raise ConfigError(
            f"device spec {spec!r}: expected auto, slurm, inventory, nvml or cpu:N[:SIZE]"
        )

    if spec == "slurm" or (spec == "auto" and env.get("SLURM_JOB_ID")):
        return _slurm_job_devices(env, gpu_inventory)
    if spec == "inventory" or (spec == "auto" and gpu_inventory):
        if not gpu_inventory:
            raise ConfigError("--devices inventory: no gpu_inventory configured")
        return DeviceSet(from_gpu_info(load_static(gpu_inventory)), f"inventory {gpu_inventory}")
    gpus = nvml_gpus()
    if not gpus:
        raise SetupError("NVML reports no GPUs on this node; use --devices cpu:N to test")
    return DeviceSet(from_gpu_info(gpus), "NVML")
