"""gres.conf parsing: the GPU device files of one node, in the order Slurm indexes them.

Slurm's GPU index (SLURM_JOB_GPUS) is a position in the node's list of gres/gpu device
files. The list is built from the ``Name=gpu`` lines that apply to the node, each ``File=``
expanded (``/dev/nvidia[0-3]``, comma lists), then stably sorted by the number at the end
of the file name, as Slurm's gres/gpu plugin does (``_sort_gpu_by_file``).
"""

from __future__ import annotations

import os
import re

from acbslurm.errors import ConfigError
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
    """The gres/gpu device files of ``node`` in Slurm's index order."""
    p = os.fspath(path)
    files: list[str] = []
    _collect(p, node, files, depth=0)
    return sorted(files, key=_file_number)  # stable: equal numbers keep file order


def _collect(p: str, node: str, files: list[str], depth: int) -> None:
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
            _collect(where_inc, node, files, depth + 1)
            continue
        fields = parse_line(line, where)
        if fields.get("name", "").lower() != "gpu" or "file" not in fields:
            continue  # AutoDetect=, other GRES, or GPUs without device files
        nodes = fields.get("nodename")
        if nodes is not None and node not in expand_hostlist(nodes):
            continue
        files.extend(expand_hostlist(fields["file"]))
