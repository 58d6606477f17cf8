"""--start/--end values: dates, date-times, unix seconds and ``now-<N><unit>``."""

from __future__ import annotations

import re
import time
from datetime import datetime

_REL = re.compile(r"^now(?:-(\d+)(s|m|h|d|w))?$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_FORMATS = ("%Y-%m-%d", "%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S")


def parse_time(text: str, now: float | None = None) -> int:
    """Unix seconds for ``text`` in local time; ValueError says what is accepted."""
    now_i = int(time.time() if now is None else now)
    raw = text.strip()
    m = _REL.match(raw.lower())
    if m:
        return now_i - (int(m.group(1)) * _UNIT[m.group(2)] if m.group(1) else 0)
    if raw.startswith("@") and raw[1:].isdigit():
        return int(raw[1:])
    for fmt in _FORMATS:
        try:
            return int(datetime.strptime(raw, fmt).timestamp())
        except ValueError:
            continue
    raise ValueError(
        f"cannot read time {text!r}: use YYYY-MM-DD, YYYY-MM-DDTHH:MM[:SS], @UNIXSECONDS, "
        "now or now-N[s|m|h|d|w]"
    )


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
