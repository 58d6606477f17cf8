"""The node's GPUs read through NVML (``pynvml``), imported only when asked for.

Every GPU is identified by its ``/dev/nvidiaN`` minor number and its UUID; MIG devices
are listed too, by their own MIG UUID, with the minor number of their parent GPU.
"""

from __future__ import annotations

from typing import Any

from acbslurm.errors import SetupError
from acbslurm.gpu.inventory import GpuInfo


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def nvml_inventory(include_mig: bool = True) -> list[GpuInfo]:
    """All GPUs (and MIG devices) NVML sees on this node."""
    try:
        import pynvml
    except ImportError:
        raise SetupError("pynvml is not installed: pip install nvidia-ml-py") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise SetupError(
            f"NVML cannot start ({exc}): no NVIDIA driver here; "
            "set gpu_inventory to a static inventory file instead"
        ) from None
    try:
        out: list[GpuInfo] = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            minor = int(pynvml.nvmlDeviceGetMinorNumber(h))
            out.append(_info(pynvml, h, i, minor))
            if include_mig:
                out.extend(_mig_devices(pynvml, h, i, minor))
        return out
    finally:
        pynvml.nvmlShutdown()


def _info(pynvml: Any, handle: Any, index: int, minor: int) -> GpuInfo:
    return GpuInfo(
        index=index,
        minor=minor,
        uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
        name=_text(pynvml.nvmlDeviceGetName(handle)),
        memory_total=int(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
        device=f"/dev/nvidia{minor}",
    )


def _mig_devices(pynvml: Any, parent: Any, index: int, minor: int) -> list[GpuInfo]:
    try:
        current, _pending = pynvml.nvmlDeviceGetMigMode(parent)
    except pynvml.NVMLError:
        return []  # GPU without MIG support
    if current != pynvml.NVML_DEVICE_MIG_ENABLE:
        return []
    out: list[GpuInfo] = []
    for j in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(parent)):
        try:
            mh = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, j)
        except pynvml.NVMLError:
            continue  # empty slot
        # A MIG device is named by its own UUID but lives on its parent's device file.
        out.append(_info(pynvml, mh, index, minor))
    return out
