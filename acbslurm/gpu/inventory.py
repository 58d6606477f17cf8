"""GPU inventories: what GPUs a node has, by minor number and UUID.

The static inventory is a JSON file (used by the sandbox and by sites without NVML):

    {"gpus": [{"index": 0, "minor": 0, "uuid": "GPU-...", "name": "...",
               "memory_total": 25769803776, "device": "/dev/nvidia0"}]}
"""

from __future__ import annotations

import json
import os

from acbslurm.errors import ConfigError
from acbslurm.values import as_dict, frozen


@frozen
class GpuInfo:
    index: int  # NVML's enumeration index (never used alone for mapping)
    minor: int  # /dev/nvidiaN minor number
    uuid: str  # GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (or MIG-...)
    name: str = ""
    memory_total: int = 0  # bytes
    device: str = ""  # device file path


# The name the sandbox gives its emulated GPUs (no CUDA behind them): a model pool
# computes on the CPU when every device it leases is one of these.
EMULATED_GPU_NAME = "Emulated GPU (acbslurm sandbox)"


def sandbox_uuid(seed: str, minor: int) -> str:
    """A deterministic UUID in NVIDIA's format for emulated GPU ``minor``."""
    import hashlib  # only the sandbox needs it; the hooks import this module

    h = hashlib.sha256(f"{seed}:{minor}".encode()).hexdigest()
    return f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def load_static(path: str | os.PathLike[str]) -> list[GpuInfo]:
    p = os.fspath(path)
    try:
        with open(p) as f:
            data = json.loads(f.read())
    except FileNotFoundError:
        raise ConfigError(f"GPU inventory {p} does not exist") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"GPU inventory {p}: not valid JSON: {exc}") from None
    gpus = data.get("gpus") if isinstance(data, dict) else None
    if not isinstance(gpus, list):
        raise ConfigError(f'GPU inventory {p}: expected {{"gpus": [...]}}')
    out: list[GpuInfo] = []
    for i, g in enumerate(gpus):
        try:
            out.append(
                GpuInfo(
                    index=int(g["index"]),
                    minor=int(g["minor"]),
                    uuid=str(g["uuid"]),
                    name=str(g.get("name", "")),
                    memory_total=int(g.get("memory_total", 0)),
                    device=str(g.get("device", "")),
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"GPU inventory {p}: gpus[{i}] is invalid ({exc})") from None
    return out


def write_static(path: str | os.PathLike[str], gpus: list[GpuInfo]) -> None:
    with open(path, "w") as f:
        f.write(json.dumps({"gpus": [as_dict(g) for g in gpus]}, indent=2) + "\n")
