"""Every unit acbslurm reads, in one place: integers, numbers, sizes, ranges and times.

- Integers are ASCII digits only. ``str.isdigit()`` and the regex ``\\d`` also accept
  ``²`` or ``٢``, which ``int()`` then rejects or Slurm misreads on an ``#SBATCH`` line.
- Numbers are finite: ``nan`` and ``inf`` are refused wherever a float is read.
- Sizes are binary everywhere, as Slurm (``--mem=2G``), Docker (``--memory 2g``) and
  PyTorch's reports count them: ``2G`` = ``2GB`` = ``2GiB`` = 2 * 1024**3 bytes.
- Ranges are Slurm's index lists (``0-1,4``: CPU_IDs, GRES ``IDX:``).
- A *time limit* is Slurm's duration (``1-00:00:00``); an *instant* is a point in time
  (``2026-01-31``, ``@UNIX``, ``now-7d``), as ``acbslurm report --start`` takes it.

The Slurm hooks import this module: no ``typing``, ``pathlib`` or ``datetime`` at import.
"""

from __future__ import annotations

import math
import re
import time

from acbslurm.errors import short_repr

# -- integers and numbers ------------------------------------------------------------


def is_ascii_int(text: str) -> bool:
    """``text`` is one or more ASCII digits (no sign, no space, no ``²``)."""
    return bool(text) and text.isascii() and text.isdigit()


def ascii_int(text: str) -> int:
    """``int(text)`` for ASCII digits only; ValueError otherwise."""
    if not is_ascii_int(text):
        raise ValueError(f"{text!r} is not a whole number (ASCII digits 0-9)")
    return int(text)


def finite_float(text: str | float) -> float:
    """A finite float from ``text``; ValueError for garbage, ``nan`` and ``inf``.

    Text is ASCII without ``_``: ``float()`` alone reads Arabic-Indic digits and ``1_000`` too.
    """
    if isinstance(text, str) and (not text.isascii() or "_" in text):
        raise ValueError(f"{text!r} is not a number")
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is not a finite number")
    return value


# -- sizes ---------------------------------------------------------------------------

# re.ASCII: without it IGNORECASE folds the Kelvin sign (U+212A) into k, and \s is
# any Unicode space.
# Patterns as text, compiled at first use (re caches them): the hooks import this module
# for is_ascii_int, and compiling every pattern at import would cost each hook
# (docs/benchmarks.md, "Where the client's time went").
_SIZE = r"^([0-9]+(?:\.[0-9]+)?)\s*([KMGTP]?)(?:I?B)?$"
_SIZE_FLAGS = re.IGNORECASE | re.ASCII
_POWER = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5}
SIZE_HELP = "a size such as 512M, 2G, 2GB, 1.5GiB or a number"


def size_bytes(text: str | int, *, default_unit: str = "", whole: bool = False) -> int:
    """Bytes of ``text`` (binary units). A bare number counts in ``default_unit``
    (``""`` bytes, ``"M"`` megabytes as Slurm's ``--mem``). ``whole``: no fractions."""
    if isinstance(text, bool):
        raise ValueError(f"{text!r} is not {SIZE_HELP}")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"a size must not be negative, got {text}")
        return int(text * 1024 ** _POWER[default_unit.upper()])
    m = re.match(_SIZE, text.strip(), _SIZE_FLAGS)
    if not m or (whole and "." in m.group(1)):
        raise ValueError(f"{text!r} is not {SIZE_HELP}")
    unit = m.group(2).upper() if m.group(2) else default_unit.upper()
    return int(float(m.group(1)) * 1024 ** _POWER[unit])


MEM_HELP = "a size such as 2G, 500M, 1T or a number of megabytes"


def slurm_mem(value: object) -> str:
    """A memory size in Slurm's form (``2G``, ``500M``), ValueError when it is not one.

    Slurm takes whole numbers with one letter: ``2GB`` and ``2GiB`` become ``2G``.
    """
    if isinstance(value, bool) or value is None or not isinstance(value, str | int):
        raise ValueError(f"{value!r} is not {MEM_HELP}")
    text = str(value).strip()
    m = re.match(_SIZE, text, _SIZE_FLAGS)
    if not m or "." in m.group(1) or m.group(2).upper() == "P":
        raise ValueError(f"{text!r} is not {MEM_HELP}")
    number, unit = int(m.group(1)), m.group(2).upper()
    if number <= 0:
        raise ValueError(f"{text!r} must be more than zero")
    return f"{number}{unit}"


def mem_megabytes(value: str) -> float:
    """Megabytes of a size; a bare number is megabytes, as Slurm reads ``--mem``."""
    return size_bytes(value, default_unit="M") / 1024**2


def cpu_device_spec(text: str) -> tuple[int, int]:
    """``cpu:N[:SIZE]``, N CPU stand-in devices of SIZE bytes each (0: no size given), as
    ``(N, bytes)``; ValueError saying what is wrong. The broker's ``--devices`` and the
    pool file's ``devices:`` read it here, so a pool file passes only what the broker takes."""
    parts = text.split(":")
    if parts[0] != "cpu" or len(parts) not in (2, 3):
        raise ValueError("expected cpu:N or cpu:N:SIZE")
    try:
        count = ascii_int(parts[1])
    except ValueError:
        raise ValueError(f"{parts[1]!r} is not a number") from None
    if count < 1:
        raise ValueError("need at least one device")
    return count, size_bytes(parts[2]) if len(parts) == 3 else 0


# -- ranges --------------------------------------------------------------------------


def expand_ranges(text: str) -> list[int]:
    """Slurm's index list ``0-1,4`` -> [0, 1, 4]; ValueError on anything else."""
    out: list[int] = []
    for part in text.split(","):
        if not part:
            continue
        lo, dash, hi = part.partition("-")
        if dash:
            first, last = ascii_int(lo), ascii_int(hi)
            if first > last:
                raise ValueError(f"range {part!r} runs backwards")
            out.extend(range(first, last + 1))
        else:
            out.append(ascii_int(part))
    return out


# -- time limits (durations, Slurm's --time) -----------------------------------------

_D = r"[0-9]+"
_TIME_RES = (
    rf"^(?P<m>{_D})$",
    rf"^(?P<m>{_D}):(?P<s>{_D})$",
    rf"^(?P<h>{_D}):(?P<m>{_D}):(?P<s>{_D})$",
    rf"^(?P<d>{_D})-(?P<h>{_D})$",
    rf"^(?P<d>{_D})-(?P<h>{_D}):(?P<m>{_D})$",
    rf"^(?P<d>{_D})-(?P<h>{_D}):(?P<m>{_D}):(?P<s>{_D})$",
)
UNLIMITED = ("UNLIMITED", "INFINITE")
TIME_HELP = "a time limit such as 30, 2:00:00, 1-00:00:00 or UNLIMITED"


def _time_parts(text: str) -> dict[str, int] | None:
    for rx in _TIME_RES:
        m = re.match(rx, text)
        if m:
            return {k: int(v) for k, v in m.groupdict().items() if v is not None}
    return None


# complexity: a validator: each `if` is one refusal with its own message, in the order Slurm's
# format is read (the form, each part's range, then zero); a helper per rule would be called once.
def parse_time_limit(value: object) -> str:
    """Check a Slurm time limit and return it as Slurm reads it; ValueError when invalid."""
    if not isinstance(value, str | int) or isinstance(value, bool):  # text or a whole number
        raise ValueError(f"{value!r} is not {TIME_HELP}")
    text = str(value).strip()
    if text.upper() in UNLIMITED:
        return "UNLIMITED"
    p = _time_parts(text)
    if p is None:
        raise ValueError(f"{text!r} is not {TIME_HELP}")
    # Seconds below 60, hours below 24 after days, minutes below 60 after hours.
    if p.get("s", 0) >= 60:
        raise ValueError(f"{text!r}: seconds must be below 60 ({TIME_HELP})")
    if "d" in p and p.get("h", 0) >= 24:
        raise ValueError(f"{text!r}: hours must be below 24 after a day count")
    if "h" in p and ":" in text and p.get("m", 0) >= 60:
        raise ValueError(f"{text!r}: minutes must be below 60 ({TIME_HELP})")
    if time_limit_seconds(text) <= 0:
        raise ValueError(f"{text!r} must be more than zero")
    return text


def time_limit_seconds(text: str) -> int:
    """Seconds of a valid Slurm time limit (0 for UNLIMITED)."""
    if text.upper() in UNLIMITED:
        return 0
    p = _time_parts(text)
    if p is None:
        raise ValueError(f"{text!r} is not {TIME_HELP}")
    return p.get("d", 0) * 86400 + p.get("h", 0) * 3600 + p.get("m", 0) * 60 + p.get("s", 0)


# -- instants (points in time, report windows) ----------------------------------------

_REL = r"^now(?:-([0-9]+)(s|m|h|d|w))?$"
_REL_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_FORMATS = ("%Y-%m-%d", "%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S")
# slurmdbd keeps times as unsigned unix seconds; 9999-12-31 is as far as dates print.
INSTANT_MIN = 0
INSTANT_MAX = 253402300799
INSTANT_HELP = "YYYY-MM-DD, YYYY-MM-DDTHH:MM[:SS], @UNIXSECONDS, now or now-N[s|m|h|d|w]"


# More digits than this (leading zeros aside) is past INSTANT_MAX seconds whatever the
# unit; int() of such text is never called (past 4300 digits it raises its own message).
_INSTANT_DIGITS = 15


def _count(digits: str) -> int:
    """The number ``digits`` writes, or INSTANT_MAX + 1 when it has too many digits."""
    significant = digits.lstrip("0")
    if len(significant) > _INSTANT_DIGITS:
        return INSTANT_MAX + 1
    return int(significant or "0")


# complexity: the forms of an instant (relative, @seconds, the dates) are tried in order and the
# range check applies to whichever matched; split, each form's helper would return None and the
# caller would test each, the same branches one hop away.
def parse_instant(text: str, now: float | None = None) -> int:
    """Unix seconds for ``text`` in local time; ValueError says what is accepted."""
    now_i = int(time.time() if now is None else now)
    raw = text.strip()
    value: int | None = None
    m = re.match(_REL, raw.lower())
    if m:
        ago = _count(m.group(1)) * _REL_UNIT[m.group(2)] if m.group(1) else 0
        value = now_i - ago
    elif raw.startswith("@") and is_ascii_int(raw[1:]):
        value = _count(raw[1:])
    elif raw.isascii():
        from datetime import datetime  # here: the hooks and `acbslurm run` import this module

        for fmt in _FORMATS:  # local time
            try:
                value = int(datetime.strptime(raw, fmt).timestamp())
                break
            except (ValueError, OverflowError, OSError):
                continue
    if value is None:
        raise ValueError(f"cannot read time {short_repr(text, 60)}: use {INSTANT_HELP}")
    if not INSTANT_MIN <= value <= INSTANT_MAX:
        raise ValueError(
            f"time {short_repr(text, 60)} is outside what slurmdbd records "
            "(1970-01-01 to 9999-12-31)"
        )
    return value


def iso(ts: int | None) -> str | None:
    """Local ISO-8601 with offset; None for 0/None (never started, still running).

    The same text as ``datetime.fromtimestamp(ts).astimezone().isoformat("seconds")``,
    built from one ``time.localtime`` call: per-job reports format three per job.
    """
    if not ts:
        return None
    t = time.localtime(ts)
    off = t.tm_gmtoff or 0
    sign = "-" if off < 0 else "+"
    hh, rest = divmod(abs(off), 3600)
    mm, ss = divmod(rest, 60)
    zone = f"{sign}{hh:02d}:{mm:02d}" + (f":{ss:02d}" if ss else "")
    return (
        f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}"
        f"T{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}{zone}"
    )
