"""Slurm's hostlist notation: ``n[01-03,7]``, ``/dev/nvidia[0-3]``, comma lists.

The same expansion serves node names (scontrol, gres.conf ``NodeName=``) and device
files (gres.conf ``File=``), as in Slurm's own ``hostlist_create``.
"""

from __future__ import annotations

import re

from acbslurm.errors import ConfigError
from acbslurm.units import is_ascii_int

_BRACKET = re.compile(r"\[([^\[\]]*)\]")


def expand_hostlist(expr: str) -> list[str]:
    """Expand Slurm's bracket notation: ``n[01-03,7]`` -> n01 n02 n03 n7; commas split items."""
    out: list[str] = []
    for item in _split_top_level(expr):
        out.extend(_expand_one(item))
    return out


# complexity: a one-pass scanner; its branches are the characters it tracks (brackets
# in and out, a top-level comma), each needing the depth the pass carries.
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
        for n in _bracket_numbers(part.strip(), item):
            out.extend(_expand_one(head + n + tail))
    return out


def _bracket_numbers(part: str, item: str) -> list[str]:
    """The numbers of one part of a bracket (``3``, ``01-03``), zero padding kept."""
    if "-" in part:
        lo, _, hi = part.partition("-")
        if not (is_ascii_int(lo) and is_ascii_int(hi)) or int(lo) > int(hi):
            raise ConfigError(f"bad range {part!r} in {item!r}")
        width = len(lo) if lo.startswith("0") else 0
        return [str(n).zfill(width) for n in range(int(lo), int(hi) + 1)]
    if is_ascii_int(part):
        return [part]
    raise ConfigError(f"bad range {part!r} in {item!r}")


def first_host(expr: str) -> str:
    """The first name of a hostlist (``vm-[1-2],x`` -> ``vm-1``) without expanding the
    rest: a job's first node, as `scontrol show hostnames | head -1` prints it."""
    items = _split_top_level(expr)
    if not items:
        raise ConfigError(f"no host in {expr!r}")
    item = items[0]
    while (m := _BRACKET.search(item)) is not None:
        first = m.group(1).split(",")[0].strip()
        item = (
            item[: m.start()] + _bracket_numbers(first.partition("-")[0], item)[0] + item[m.end() :]
        )
    return item
