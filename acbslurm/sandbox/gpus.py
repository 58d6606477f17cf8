"""Emulated GPUs: character devices with NVIDIA's major number and a static inventory.

With several nodes (``up --nodes``) each node has its own GPUs and inventory. Minor
numbers (and so device files and UUIDs) are unique across the nodes of one machine, so
that a device a process holds names one node's GPU (the epilog's ``device_holders``
compares device numbers); each node's inventory counts its own indices from 0.
"""

from __future__ import annotations

import os
import stat

from acbslurm.gpu.inventory import (
    EMULATED_GPU_NAME,
    GpuInfo,
    load_static,
    sandbox_uuid,
    write_static,
)
from acbslurm.sandbox.layout import Layout, Params

NVIDIA_MAJOR = 195
EMULATED_MEMORY = 24 * 1024**3


def create(layout: Layout, params: Params) -> dict[str, list[GpuInfo]]:
    layout.dev.mkdir(parents=True, exist_ok=True)
    for old in layout.dev.glob("nvidia*"):
        old.unlink()
    for old in layout.etc.glob("gpus-*.json"):
        old.unlink()
    seed = str(layout.root)
    out: dict[str, list[GpuInfo]] = {}
    for n, node in enumerate(params.node_names):
        gpus = []
        for index in range(params.gpus):
            minor = n * params.gpus + index
            dev = layout.dev / f"nvidia{minor}"
            os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, minor))
            gpus.append(
                GpuInfo(
                    index=index,
                    minor=minor,
                    uuid=sandbox_uuid(seed, minor),
                    name=EMULATED_GPU_NAME,
                    memory_total=EMULATED_MEMORY,
                    device=str(dev),
                )
            )
        write_static(layout.node_inventory(params, node), gpus)
        out[node] = gpus
    return out


def by_node(layout: Layout, params: Params) -> dict[str, list[GpuInfo]]:
    return {n: load_static(layout.node_inventory(params, n)) for n in params.node_names}


def load(layout: Layout) -> list[GpuInfo]:
    """Every emulated GPU of the sandbox (all nodes')."""
    params = layout.load_params()
    if params is None or params.nodes == 1:
        return load_static(layout.inventory)
    return [g for gpus in by_node(layout, params).values() for g in gpus]
