"""Emulated GPUs: character devices with NVIDIA's major number and a static inventory.

With several nodes (``up --nodes``) each node has its own GPUs and inventory. Minor
numbers (and so device files and UUIDs) are unique across the nodes of one machine, so
that a device a process holds names one node's GPU (the epilog's ``device_holders``
compares device numbers); each node's inventory counts its own indices from 0.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from pathlib import Path

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
# World read-write, as the NVIDIA driver creates /dev/nvidiaN on a real node by default
# (NVreg_DeviceFileMode=0666): who may open a GPU is decided by the job's devices cgroup
# and the container's devices, not by the file's mode.
DEVICE_MODE = 0o666


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
            os.mknod(dev, DEVICE_MODE | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, minor))
            # mknod's mode passes through the umask: set it outright.
            os.chmod(dev, DEVICE_MODE)
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


def fence(layout: Layout) -> None:
    """Install the GPU fence as an admin would (docs/admin-guide.md, "GPU fence"): the
    emulated device files root:root 0660, no ACL, no world access; the prolog then gives
    each job's user its own GPUs (the ``gpu_fence`` setting, render.py)."""
    for dev in layout.dev.glob("nvidia*"):
        if not dev.is_char_device() or dev.is_symlink():
            continue
        with contextlib.suppress(OSError):  # none was set
            os.removexattr(dev, "system.posix_acl_access")
        os.chown(dev, 0, 0)
        os.chmod(dev, 0o660)


def by_node(layout: Layout, params: Params) -> dict[str, list[GpuInfo]]:
    return {n: load_static(layout.node_inventory(params, n)) for n in params.node_names}


def load(layout: Layout) -> list[GpuInfo]:
    """Every emulated GPU of the sandbox (all nodes')."""
    params = layout.load_params()
    if params is None or params.nodes == 1:
        return load_static(layout.inventory)
    return [g for gpus in by_node(layout, params).values() for g in gpus]


CDI_KIND = "nvidia.com/gpu"
CDI_VERSION = "0.5.0"


def cdi_env_name(gpu: GpuInfo) -> str:
    """The env edit a device adds: one name per device, so that with two GPUs a
    container gets both (one NVIDIA_VISIBLE_DEVICES per device would leave the last)."""
    return f"SANDBOX_CDI_GPU{gpu.minor}"


def cdi_device(gpu: GpuInfo) -> dict[str, object]:
    """One emulated GPU as NVIDIA's toolkit names it (``nvidia.com/gpu=<UUID>``).

    Rootless runc bind-mounts a device node from the host path it is given, so the
    node is the sandbox's own (there is no /dev/nvidiaN on the host) and a mount
    puts it at /dev/nvidiaN too, where programs look for it.
    """
    return {
        "name": gpu.uuid,
        "containerEdits": {
            "deviceNodes": [{"path": gpu.device}],
            "mounts": [
                {
                    "hostPath": gpu.device,
                    "containerPath": f"/dev/nvidia{gpu.minor}",
                    "options": ["bind"],
                }
            ],
            "env": [f"{cdi_env_name(gpu)}={gpu.uuid}"],
        },
    }


def cdi_spec(all_gpus: list[GpuInfo], hook: str) -> dict[str, object]:
    """The toolkit's spec-wide edits are NVIDIA_VISIBLE_DEVICES=void (the legacy hook
    then does nothing) and hooks of its own; here one hook: the stand-in, which records
    the container's CDI GPUs as it records a `--gpus` start's."""
    return {
        "cdiVersion": CDI_VERSION,
        "kind": CDI_KIND,
        "devices": [cdi_device(g) for g in all_gpus],
        "containerEdits": {
            "env": ["NVIDIA_VISIBLE_DEVICES=void"],
            "hooks": [
                {"hookName": "createRuntime", "path": hook, "args": [Path(hook).name, "cdi"]}
            ],
        },
    }


def write_cdi_spec(layout: Layout, params: Params) -> None:
    """Every node's GPUs in one spec: the user's one daemon serves all nodes. JSON is
    YAML, and Docker's CDI code reads ``.yaml`` files with a YAML parser."""
    all_gpus = [g for gs in by_node(layout, params).values() for g in gs]
    layout.cdi_dir.mkdir(parents=True, exist_ok=True)
    layout.cdi_dir.chmod(0o755)
    tmp = layout.cdi_spec.with_suffix(".tmp")
    hook = str(layout.bin / "nvidia-container-runtime-hook")
    tmp.write_text(json.dumps(cdi_spec(all_gpus, hook), indent=2) + "\n")
    tmp.chmod(0o644)
    tmp.replace(layout.cdi_spec)
