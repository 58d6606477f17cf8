"""Emulated GPUs: character devices with NVIDIA's major number and a static inventory."""

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
from acbslurm.sandbox.layout import Layout

NVIDIA_MAJOR = 195
EMULATED_MEMORY = 24 * 1024**3


def create(layout: Layout, count: int) -> list[GpuInfo]:
    layout.dev.mkdir(parents=True, exist_ok=True)
    for old in layout.dev.glob("nvidia*"):
        old.unlink()
    seed = str(layout.root)
    gpus = []
    for minor in range(count):
        dev = layout.dev / f"nvidia{minor}"
        os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, minor))
        gpus.append(
            GpuInfo(
                index=minor,
                minor=minor,
                uuid=sandbox_uuid(seed, minor),
                name=EMULATED_GPU_NAME,
                memory_total=EMULATED_MEMORY,
                device=str(dev),
            )
        )
    write_static(layout.inventory, gpus)
    return gpus


def load(layout: Layout) -> list[GpuInfo]:
    return load_static(layout.inventory)
