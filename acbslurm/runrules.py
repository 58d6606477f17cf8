"""The values `acbslurm run` takes that a job spec's ``container:`` block gives as well.

One rule each, so that ``spec/`` refuses on the submit host, with the spec's
``file:line``, exactly what `acbslurm run` would refuse on the node after the job
waited in the queue. Each raises ValueError with the value quoted; the callers add
where it came from (a spec key, a ``--user`` option).
"""

from __future__ import annotations

import re

from acbslurm.units import finite_float, size_bytes

# `docker run --user`: a name or id, and optionally a group name or id.
_RUN_AS = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_.-]*(:[A-Za-z0-9_.][A-Za-z0-9_.-]*)?$")
USER_HELP = "NAME or UID[:GROUP or GID]"
SHM_HELP = "a size like 512m or 8g"
GRACE_HELP = "a finite number of seconds >= 0"


def run_as(text: str) -> str:
    """``NAME|UID[:GROUP|GID]`` as `docker run --user` takes it."""
    if not _RUN_AS.match(text):
        raise ValueError(f"expected {USER_HELP}, got {text!r}")
    return text


def shm_bytes(text: str | int) -> int:
    """A ``/dev/shm`` size in bytes (binary units, as Docker counts): positive.

    The container's memory limit, which it may not pass, is known only on the node.
    """
    try:
        value = size_bytes(text)
    except ValueError:
        raise ValueError(f"expected {SHM_HELP}, got {text!r}") from None
    if value <= 0:
        raise ValueError(f"must be positive, got {text!r}")
    return value


def grace_seconds(value: str | float) -> float:
    """Seconds between the stop's SIGTERM and SIGKILL: finite, so a cancel always ends
    the container."""
    try:
        seconds = finite_float(value)
    except ValueError:
        raise ValueError(f"must be {GRACE_HELP}, got {value!r}") from None
    if seconds < 0:
        raise ValueError(f"must be {GRACE_HELP}, got {value!r}")
    return seconds
