"""gres.conf parsing: the GPU device files of one node, in the order Slurm indexes them.

Slurm's GPU index (SLURM_JOB_GPUS) is a position in the node's list of gres/gpu device
files. The list is built from the ``Name=gpu`` lines that apply to the node, each ``File=``
expanded (``/dev/nvidia[0-3]``, comma lists), then stably sorted by the number at the end
of the file name, as Slurm's gres/gpu plugin does (``_sort_gpu_by_file``).

``AutoDetect=nvml`` (a global line, or on the node's ``NodeName=`` line) without ``File=``
lines for the node: slurmd takes the GPUs from NVML, each as ``/dev/nvidia<minor>``, and
sorts them the same way, so the node's list is the inventory's whole GPUs by minor number
(``autodetect_device_files``). Without either, Slurm cannot bind GPUs to device files and
neither can acbslurm: ``node_gpu_devices`` says so instead of mapping nothing.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

from acbslurm.errors import ConfigError
from acbslurm.gpu.inventory import GpuInfo
from acbslurm.slurm.hostlist import expand_hostlist

_TRAILING_NUMBER = re.compile(r"([0-9]+)$")


def _file_number(path: str) -> int:
    m = _TRAILING_NUMBER.search(path)
    return int(m.group(1)) if m else 0


def parse_line(line: str, where: str) -> dict[str, str]:
    """``Key=Value`` pairs of one line; keys are case-insensitive (returned lower case)."""
    fields: dict[str, str] = {}
    for token in line.split():
        key, sep, value = token.partition("=")
        if not sep or not key:
            raise ConfigError(f"{where}: expected Key=Value, got {token!r}")
        fields[key.lower()] = value
    return fields


def gpu_device_files(path: str | os.PathLike[str], node: str) -> list[str]:
    """The gres/gpu device files of ``node`` in Slurm's index order (``File=`` lines only)."""
    return gpu_gres(path, node)[0]


def gpu_gres(path: str | os.PathLike[str], node: str) -> tuple[list[str], str]:
    """``node``'s ``File=`` device files in Slurm's order, and its ``AutoDetect`` value
    (lower case; "" when gres.conf sets none; a ``NodeName=`` line's beats a global one)."""
    p = os.fspath(path)
    files: list[str] = []
    autodetect: dict[str, str] = {}
    _collect(p, node, files, depth=0, autodetect=autodetect)
    mode = autodetect.get("node", autodetect.get("global", ""))
    return sorted(files, key=_file_number), mode  # stable: equal numbers keep file order


def autodetect_device_files(inventory: Sequence[GpuInfo]) -> list[str]:
    """The list slurmd builds with ``AutoDetect=nvml``: each whole GPU's device file,
    sorted by its number (NVML's enumeration order plays no part)."""
    whole = [g for g in inventory if g.uuid.startswith("GPU-")]
    files = [g.device or f"/dev/nvidia{g.minor}" for g in sorted(whole, key=lambda g: g.minor)]
    return sorted(files, key=_file_number)


def node_gpu_devices(
    path: str | os.PathLike[str], node: str, inventory: Sequence[GpuInfo]
) -> list[str]:
    """The device files Slurm's GPU indices of ``node`` refer to: the ``File=`` lines, or
    with ``AutoDetect=nvml`` and none, the inventory's GPUs; a clear error otherwise."""
    files, mode = gpu_gres(path, node)
    if files:
        return files
    p = os.fspath(path)
    if mode == "nvml":
        return autodetect_device_files(inventory)
    if mode and mode != "off":
        raise ConfigError(
            f"gres.conf {p}: AutoDetect={mode} is not supported by acbslurm "
            "(only nvml, or File= lines)"
        )
    raise ConfigError(
        f"gres.conf {p} lists no GPU device files (Name=gpu File=...) for node {node!r} "
        "and does not set AutoDetect=nvml: add File= lines or AutoDetect=nvml"
    )


# complexity: a one-pass line reader; each branch is one kind of gres.conf line (blank,
# Include, another node's, AutoDetect=, a GPU's File=), read in the file's order.
def _collect(p: str, node: str, files: list[str], depth: int, autodetect: dict[str, str]) -> None:
    if depth > 8:
        raise ConfigError(f"{p}: Include nested too deeply")
    try:
        with open(p) as f:
            text = f.read()
    except FileNotFoundError:
        raise ConfigError(f"gres.conf {p} does not exist") from None
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{p}:{lineno}"
        if line.lower().startswith("include "):
            inc = line.split(None, 1)[1].strip()
            where_inc = inc if os.path.isabs(inc) else os.path.join(os.path.dirname(p), inc)
            _collect(where_inc, node, files, depth + 1, autodetect)
            continue
        fields = parse_line(line, where)
        nodes = fields.get("nodename")
        if nodes is not None and node not in expand_hostlist(nodes):
            continue
        if "autodetect" in fields:
            autodetect["global" if nodes is None else "node"] = fields["autodetect"].lower()
        if fields.get("name", "").lower() != "gpu" or "file" not in fields:
            continue  # AutoDetect=, other GRES, or GPUs without device files
        files.extend(expand_hostlist(fields["file"]))
