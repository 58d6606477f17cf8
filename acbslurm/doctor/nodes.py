"""The node as slurmctld sees it: drained by a failed prolog, by acbslurm's epilog, or by
an admin. A drained node starts no job, and nothing else in the doctor would say so."""

from __future__ import annotations

from acbslurm.doctor.context import Context
from acbslurm.doctor.result import Check, fail, ok, warn
from acbslurm.errors import AcbslurmError
from acbslurm.slurm.cluster import nodes

GUIDE = "docs/admin-guide.md, 'Faults'"
# What slurmd writes when the prolog exits non-zero; acbslurm's epilog drains with its own.
PROLOG_ERROR = "Prolog error"
ACBSLURM_REASON = "acbslurm: job "


def _resume(node: str) -> str:
    return f"`scontrol update nodename={node} state=resume`"


def check_node_state(ctx: Context) -> Check:
    try:
        known = {n.name: n for n in nodes(env=dict(ctx.env))}
    except AcbslurmError as exc:
        return warn("node-state", f"cannot ask slurmctld about node {ctx.node}: {exc}")
    info = known.get(ctx.node)
    if info is None:
        return warn(
            "node-state",
            f"slurmctld has no node {ctx.node} (it has {', '.join(sorted(known)) or 'none'})",
            "pass Slurm's name for this node with `--node NAME`",
        )
    if not info.unavailable:
        return ok("node-state", f"node {info.name} is {info.state}")
    what = f"node {info.name} is {info.state} ({info.reason or 'no reason given'})"
    if info.reason.startswith(PROLOG_ERROR):
        return fail(
            "node-state",
            f"{what}: the acbslurm prolog failed",
            "find why in slurmd's log and syslog (`acbslurm-prolog: error: job N: ...`: the "
            "record directory full or read-only, GPUs that do not map), fix it, then "
            f"{_resume(info.name)}; release the job Slurm requeued held (`squeue -t PD -o "
            "'%i %r'` shows launch_failed_requeued_held) with `scontrol release JOBID` "
            f"({GUIDE})",
        )
    if info.reason.startswith(ACBSLURM_REASON):
        return fail(
            "node-state",
            f"{what}: acbslurm's epilog drained it",
            "the job's container may still hold its GPUs: as its user, find and remove it "
            "(`docker ps -a --filter label=acbslurm.job_id=N`, `docker rm -f ID`), or "
            f"restart the user's daemon, then {_resume(info.name)} ({GUIDE})",
        )
    # An admin's own drain (maintenance) is theirs to end: worth a note, not a failure.
    return warn(
        "node-state", f"{what}: Slurm starts no job here", f"when done: {_resume(info.name)}"
    )
