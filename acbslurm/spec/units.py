"""Slurm's units: memory sizes (``2G``, ``500M``) and time limits (``1-00:00:00``).

Values are checked here so a typo fails before submission with a message that says
what is accepted, instead of sbatch rejecting the job later.
"""

from __future__ import annotations

import re

_MEM_RE = re.compile(r"^(\d+)\s*([KMGT]?)(?:B|iB)?$", re.IGNORECASE)
_MEM_FACTOR_MB = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024 * 1024}

# Slurm's accepted time formats (sbatch --time).
_TIME_RES = [
    re.compile(r"^(?P<m>\d+)$"),
    re.compile(r"^(?P<m>\d+):(?P<s>\d+)$"),
    re.compile(r"^(?P<h>\d+):(?P<m>\d+):(?P<s>\d+)$"),
    re.compile(r"^(?P<d>\d+)-(?P<h>\d+)$"),
    re.compile(r"^(?P<d>\d+)-(?P<h>\d+):(?P<m>\d+)$"),
    re.compile(r"^(?P<d>\d+)-(?P<h>\d+):(?P<m>\d+):(?P<s>\d+)$"),
]
UNLIMITED = ("UNLIMITED", "INFINITE")

MEM_HELP = "a size such as 2G, 500M, 1T or a number of megabytes"
TIME_HELP = "a time limit such as 30, 2:00:00, 1-00:00:00 or UNLIMITED"


def parse_mem(value: object) -> str:
    """Normalise a memory size to Slurm's form (``2G``); ValueError when it is not one."""
    if isinstance(value, bool) or value is None:
        raise ValueError(f"{value!r} is not {MEM_HELP}")
    text = str(value).strip()
    m = _MEM_RE.match(text)
    if not m:
        raise ValueError(f"{text!r} is not {MEM_HELP}")
    number, unit = int(m.group(1)), m.group(2).upper()
    if number <= 0:
        raise ValueError(f"{text!r} must be more than zero")
    return f"{number}{unit}"


def mem_megabytes(value: str) -> float:
    """Megabytes of a size already normalised by ``parse_mem``."""
    m = _MEM_RE.match(value)
    if not m:
        raise ValueError(f"{value!r} is not {MEM_HELP}")
    return int(m.group(1)) * _MEM_FACTOR_MB[m.group(2).upper()]


def parse_time(value: object) -> str:
    """Check a Slurm time limit and return it as Slurm reads it; ValueError when invalid."""
    if isinstance(value, bool) or value is None:
        raise ValueError(f"{value!r} is not {TIME_HELP}")
    text = str(value).strip()
    if text.upper() in UNLIMITED:
        return "UNLIMITED"
    for rx in _TIME_RES:
        m = rx.match(text)
        if m:
            parts = m.groupdict()
            if any(k in parts and parts[k] is not None and int(parts[k]) >= 60 for k in "s"):
                raise ValueError(f"{text!r}: seconds must be below 60 ({TIME_HELP})")
            if "h" in parts and parts["h"] is not None and "d" in parts and int(parts["h"]) >= 24:
                raise ValueError(f"{text!r}: hours must be below 24 after a day count")
            if ":" in text and "m" in parts and int(parts["m"]) >= 60 and "h" in parts:
                raise ValueError(f"{text!r}: minutes must be below 60 ({TIME_HELP})")
            if time_seconds(text) <= 0:
                raise ValueError(f"{text!r} must be more than zero")
            return text
    raise ValueError(f"{text!r} is not {TIME_HELP}")


def time_seconds(text: str) -> int:
    """Seconds of a valid Slurm time limit (0 for UNLIMITED)."""
    if text.upper() in UNLIMITED:
        return 0
    for rx in _TIME_RES:
        m = rx.match(text)
        if m:
            p = {k: int(v) for k, v in m.groupdict().items() if v is not None}
            return p.get("d", 0) * 86400 + p.get("h", 0) * 3600 + p.get("m", 0) * 60 + p.get("s", 0)
    raise ValueError(f"{text!r} is not {TIME_HELP}")
