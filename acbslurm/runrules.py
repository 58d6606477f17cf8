"""The values `acbslurm run` takes that a job spec's ``container:`` block gives as well.

One rule each, so that ``spec/`` refuses on the submit host, with the spec's
``file:line``, exactly what `acbslurm run` would refuse on the node after the job
waited in the queue. Each raises ValueError with the value quoted; the callers add
where it came from (a spec key, a ``--user`` option).
"""

from __future__ import annotations

import re
import resource

from acbslurm.units import finite_float, is_ascii_int, size_bytes

# `docker run --user`: a name or id, and optionally a group name or id.
_RUN_AS = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_.-]*(:[A-Za-z0-9_.][A-Za-z0-9_.-]*)?$")
USER_HELP = "NAME or UID[:GROUP or GID]"
SHM_HELP = "a size like 512m or 8g"
GRACE_HELP = "a finite number of seconds >= 0"
ULIMIT_HELP = "NAME=SOFT[:HARD] (a whole number, or -1 or unlimited)"
# `docker run --ulimit`'s names (docker/go-units' ulimit.go) and the limit each sets.
ULIMITS: dict[str, int] = {
    "core": resource.RLIMIT_CORE,
    "cpu": resource.RLIMIT_CPU,
    "data": resource.RLIMIT_DATA,
    "fsize": resource.RLIMIT_FSIZE,
    "locks": 10,  # RLIMIT_LOCKS of Linux's resource.h: Python's module does not name it
    "memlock": resource.RLIMIT_MEMLOCK,
    "msgqueue": resource.RLIMIT_MSGQUEUE,
    "nice": resource.RLIMIT_NICE,
    "nofile": resource.RLIMIT_NOFILE,
    "nproc": resource.RLIMIT_NPROC,
    "rss": resource.RLIMIT_RSS,
    "rtprio": resource.RLIMIT_RTPRIO,
    "rttime": resource.RLIMIT_RTTIME,
    "sigpending": resource.RLIMIT_SIGPENDING,
    "stack": resource.RLIMIT_STACK,
}
UNLIMITED = -1  # as Docker's API and getrlimit (RLIM_INFINITY) say it
PUBLISH_HELP = "[IP:][HOST_PORT:]CONTAINER_PORT[/tcp|udp]"
# `docker run -p`'s form (the site's port range is known only on the node).
PUBLISH = re.compile(
    r"^(?:(?P<ip>[0-9]{1,3}(?:\.[0-9]{1,3}){3}|\[[0-9a-fA-F:]+\]):)?"
    r"(?:(?P<host>[0-9]*):)?(?P<ctr>[0-9]+)(?:/(?P<proto>tcp|udp))?$"
)
_NETWORK_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
NETWORK_HELP = "bridge (Docker's default), host, none, or a network of your daemon"
REQUEUE_EXIT_HELP = "an exit code 1-255 other than Docker's own 125, 126 and 127"


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


def _limit_value(word: str, text: str) -> int:
    if word == "unlimited" or word == "-1":
        return UNLIMITED
    if not is_ascii_int(word):
        raise ValueError(f"expected {ULIMIT_HELP}, got {text!r}")
    return int(word)


def ulimit(text: str) -> tuple[str, int, int]:
    """``NAME=SOFT[:HARD]`` as `docker run --ulimit` takes it (HARD: SOFT when not
    given; -1 or ``unlimited``: no limit) -> (name, soft, hard), soft never above hard."""
    name, eq, values = text.partition("=")
    if not eq or name not in ULIMITS:
        known = ", ".join(sorted(ULIMITS))
        raise ValueError(f"expected {ULIMIT_HELP} with NAME one of {known}, got {text!r}")
    soft_text, _, hard_text = values.partition(":")
    soft = _limit_value(soft_text, text)
    hard = _limit_value(hard_text, text) if hard_text else soft
    if hard != UNLIMITED and (soft == UNLIMITED or soft > hard):
        raise ValueError(f"the soft limit is above the hard one in {text!r}")
    return name, soft, hard


def requeue_exit(text: str | int) -> int:
    """The container's exit code that asks for the job to be requeued: 1-255, not 0
    (success) nor 125-127 (Docker's own: the daemon failed, the command could not be
    run, or found), which no checkpoint would mean."""
    word = str(text).strip()
    if not is_ascii_int(word) or not 1 <= int(word) <= 255 or int(word) in (125, 126, 127):
        raise ValueError(f"must be {REQUEUE_EXIT_HELP}, got {text!r}")
    return int(word)


def publish(text: str) -> str:
    """``-p`` in `docker run`'s form, ports 1-65535."""
    m = PUBLISH.match(text)
    if m is None:
        raise ValueError(f"expected {PUBLISH_HELP}, got {text!r}")
    if not 1 <= int(m["ctr"]) <= 65535 or int(m["host"] or 0) > 65535:
        raise ValueError(f"ports are 1-65535, got {text!r}")
    return text


def network_mode(name: str) -> str:
    """``--network``: Docker's modes and the user's own networks; never another
    container's namespace (``container:NAME``), which is not the job's."""
    if name.startswith("container:") or name.startswith("ns:"):
        raise ValueError(
            f"{name!r} joins another container's network namespace, which is not this "
            f"job's; expected {NETWORK_HELP}"
        )
    if not _NETWORK_NAME.match(name):
        raise ValueError(f"expected {NETWORK_HELP}, got {name!r}")
    return name


def device_parts(text: str) -> tuple[str, str, str]:
    """``/HOST[:/CONTAINER][:PERMS]`` as `docker run --device` reads it -> (host,
    container, permissions); whether HOST is a device the site lists is known only on
    the node."""
    host, _, rest = text.partition(":")
    target, _, perms = rest.partition(":")
    if rest and not target.startswith("/") and not perms and set(target) <= set("rwm"):
        target, perms = "", target  # HOST:PERMS
    if not host.startswith("/") or (target and not target.startswith("/")):
        raise ValueError(f"expected /HOST[:/CONTAINER][:rwm], got {text!r}")
    _device_perms(perms, text)
    return host, target or host, perms or "rwm"


def _device_perms(perms: str, text: str) -> None:
    if perms and (not set(perms) <= set("rwm") or len(set(perms)) != len(perms)):
        raise ValueError(f"permissions are some of r, w, m, got {text!r}")
