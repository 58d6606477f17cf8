"""This node's view of GPUs: its inventory and a job's GPUs, from the site settings."""

from __future__ import annotations

from collections.abc import Mapping

from acbslurm.config import Settings, this_node
from acbslurm.gpu.gres_conf import node_gpu_devices
from acbslurm.gpu.inventory import GpuInfo, load_static
from acbslurm.gpu.mapping import JobGpus, comma_tokens, index_variable, map_job_gpus
from acbslurm.units import is_ascii_int


def node_name(env: Mapping[str, str]) -> str:
    """Slurm's name for this node (SLURMD_NODENAME), else the short host name."""
    return this_node(env)


def node_inventory(settings: Settings) -> list[GpuInfo]:
    """The static inventory when configured, else NVML."""
    if settings.gpu_inventory:
        return load_static(settings.gpu_inventory)
    # NVML only without a static inventory: the hooks import this module
    from acbslurm.gpu.nvml import nvml_inventory

    return nvml_inventory()


def job_gpus(env: Mapping[str, str], settings: Settings) -> JobGpus:
    """Map the allocation in ``env`` to GPUs; reads gres.conf and the inventory only if needed."""
    source = index_variable(env)
    if not (env.get(source) or env.get("CUDA_VISIBLE_DEVICES")):
        return JobGpus()
    inventory = node_inventory(settings)
    uses_indices = any(is_ascii_int(t) for t in comma_tokens(env.get(source, "")))
    node = node_name(env)
    devices = node_gpu_devices(settings.gres_conf, node, inventory) if uses_indices else []
    return map_job_gpus(env, devices, inventory, node=node)
