"""How long a preempted job has left: its partition's or QOS's GraceTime.

When Slurm preempts a job with a grace time it sets the job's end to the preemption's
time plus the grace and sends SIGCONT and SIGTERM at once (``_job_check_grace_internal``
in Slurm's interfaces/preempt.c, 23.02 to 26.05); the job then has until that end to
checkpoint. A cancel or a time limit ends the job now: no PreemptTime, and nothing to
extend. So the job's own record tells a preemption's SIGTERM from the others.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from acbslurm.errors import SlurmError
from acbslurm.slurm.commands import slurm
from acbslurm.slurm.versions import parse_release
from acbslurm.units import is_ascii_int

# s: a stop must not wait long on a slow controller to learn its grace.
QUERY_TIMEOUT = 3.0
# From this release (24.11's source has it, 23.11's not) a preempted job whose batch
# script ends within its grace is ended as the preemption says, requeued or PREEMPTED
# (GRACE_PREEMPT in slurmctld's proc_req.c), and one whose grace runs out first keeps
# that flag: its next run, ending, is requeued once more (seen on 25.11.7). Before it,
# such a job ended COMPLETED or FAILED by its own exit.
ENDS_AS_PREEMPTED_FROM = (24, 11)


def _epoch(value: str) -> float | None:
    """scontrol's local ``2026-12-04T06:00:00``; None for ``None``/``Unknown``."""
    try:
        return time.mktime(time.strptime(value, "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return None


def _fields(shown: str) -> dict[str, str]:
    return dict(f.partition("=")[::2] for f in shown.split() if "=" in f)


def parse_grace_left(shown: str, now: float, partition_grace: int | None = None) -> float | None:
    """Seconds from ``now`` to the end of a preempted job (``scontrol -o show job``'s
    PreemptTime and EndTime); None when it was not preempted. A job without a time limit
    shows no end (``Unknown``): then its preemption's time plus ``partition_grace``."""
    fields = _fields(shown)
    preempted = _epoch(fields.get("PreemptTime", "None"))
    if preempted is None:
        return None
    end = _epoch(fields.get("EndTime", ""))
    if end is None:
        if not partition_grace:
            return None
        end = preempted + partition_grace
    return end - now


def _show(kind: str, name: str, env: Mapping[str, str] | None) -> str:
    """``scontrol -a -o show KIND NAME``; "" when it cannot be told (``-a``: a job of a
    hidden partition, and that partition, are shown too)."""
    try:
        res = slurm(
            ["scontrol", "-a", "-o", "show", kind, name],
            env=env,
            check=False,
            timeout=QUERY_TIMEOUT,
        )
    except SlurmError:
        return ""
    return res.stdout if res.returncode == 0 else ""


def grace_left(job_id: str, env: Mapping[str, str] | None = None) -> float | None:
    """``parse_grace_left`` of the job now; None when it cannot be told."""
    shown = _show("job", job_id, env)
    fields = _fields(shown)
    grace = None
    if fields.get("PreemptTime", "None") != "None" and fields.get("EndTime") == "Unknown":
        # No time limit: the partition's GraceTime (preempt/partition_prio; a QOS's
        # grace, preempt/qos, is not read: such a job keeps the run's stop_grace).
        part = _fields(_show("partition", fields.get("Partition", ""), env))
        value = part.get("GraceTime", "")
        grace = int(value) if is_ascii_int(value) else None
    return parse_grace_left(shown, time.time(), grace)


def release_ends_as_preempted(said: str) -> bool:
    """Whether the release ``scontrol --version`` says (``slurm 25.11.7``) ends a
    preempted job whose batch script exits within its grace as the preemption says
    (``ENDS_AS_PREEMPTED_FROM``); False when it cannot be read."""
    try:
        return parse_release(said)[:2] >= ENDS_AS_PREEMPTED_FROM
    except ValueError:
        return False


def ends_as_preempted(env: Mapping[str, str] | None = None) -> bool:
    """``release_ends_as_preempted`` of the Slurm clients here; False when unknown (the
    run then holds, which is right on every release but for one extra requeue)."""
    try:
        said = slurm(["scontrol", "--version"], env=env, timeout=QUERY_TIMEOUT).stdout
    except SlurmError:
        return False
    return release_ends_as_preempted(said)
