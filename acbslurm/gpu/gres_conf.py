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

_BRACKET = re.compile(r"\[([^\[\]]*)\]")
_TRAILING_NUMBER = re.compile(r"(\d+)$")


def expand_hostlist(expr: str) -> list[str]:
    """Expand Slurm's bracket notation: ``n[01-03,7]`` -> n01 n02 n03 n7; commas split items."""
    out: list[str] = []
    for item in _split_top_level(expr):
        out.extend(_expand_one(item))
    return out


def _split_top_level(expr: str) -> list[str]:
    items: list[str] = []
    depth = 0
    current = ""
    for ch in expr:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ConfigError(f"unbalanced ']' in {expr!r}")
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += ch
    if depth != 0:
        raise ConfigError(f"unbalanced '[' in {expr!r}")
    items.append(current)
    return [i for i in (s.strip() for s in items) if i]


def _expand_one(item: str) -> list[str]:
    m = _BRACKET.search(item)
    if m is None:
        return [item]
    head, tail = item[: m.start()], item[m.end() :]
    out: list[str] = []
    for part in m.group(1).split(","):
        part = part.strip()
        if "-" in part:
            lo, _, hi = part.partition("-")
            if not (lo.isdigit() and hi.isdigit()) or int(lo) > int(hi):
                raise ConfigError(f"bad range {part!r} in {item!r}")
            width = len(lo) if lo.startswith("0") else 0
            numbers = [str(n).zfill(width) for n in range(int(lo), int(hi) + 1)]
        elif part.isdigit():
            numbers = [part]
        else:
            raise ConfigError(f"bad range {part!r} in {item!r}")
        for n in numbers:
            out.extend(_expand_one(head + n + tail))
    return out


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
    p = os.fspath(path)  # os.path, not pathlib: the prolog imports this module
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
