"""What Slurm knows beyond jobs: partitions, accounts, nodes' GPUs, a job's own details.

Each lookup is one Slurm command. A lookup that cannot be made (slurmdbd down, a
command missing) answers None: the callers warn instead of refusing a submission.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from acbslurm.errors import AcbslurmError
from acbslurm.slurm.commands import slurm
from acbslurm.slurm.hostlist import expand_hostlist
from acbslurm.slurm.jobs import query_jobs
from acbslurm.slurm.jobtypes import elapsed_seconds
from acbslurm.slurm.states import HOLDING_STATES
from acbslurm.values import frozen

if TYPE_CHECKING:
    from acbslurm.slurm.jobtypes import JobInfo

_GPU_GRES = re.compile(r"(?:^|,)gpu(?::[A-Za-z0-9_.\-]+)?:([0-9]+)")


def partition_exists(name: str, *, env: Mapping[str, str] | None = None) -> bool | None:
    """``scontrol -a show partition NAME``: True, False, or None when the controller is
    away. ``-a``: a hidden partition (``Hidden=YES``), which sbatch takes, is one too."""
    try:
        res = slurm(["scontrol", "-a", "-o", "show", "partition", name], env=env, check=False)
    except AcbslurmError:
        return None
    if res.returncode == 0:
        return bool(res.stdout.strip())
    # 22.05 says "Partition x not found" on stdout, later releases on stderr.
    if "not found" in (res.stdout + res.stderr).lower():
        return False
    return None


def account_has_user(
    account: str, user: str, *, env: Mapping[str, str] | None = None
) -> bool | None:
    """Whether ``user`` may charge ``account`` (an association); None when unknown."""
    argv = [
        "sacctmgr",
        "-n",
        "-P",
        "show",
        "associations",
        "where",
        f"account={account}",
        f"user={user}",
        "format=Account",
    ]
    try:
        res = slurm(argv, env=env, check=False)
    except AcbslurmError:
        return None
    if res.returncode != 0:
        return None
    return any(line.strip() for line in res.stdout.splitlines())


@frozen
class NodeInfo:
    """One node of ``scontrol -o show node``: its GPUs, state and the admin's reason."""

    name: str
    gpus: int
    state: str = ""  # as scontrol prints it: IDLE, MIXED+DRAIN, DOWN+NOT_RESPONDING...
    reason: str = ""  # Reason=, e.g. "Prolog error [root@2026-12-01T23:00:00]"

    @property
    def unavailable(self) -> str:
        """``drained`` or ``down`` when Slurm gives the node no new job, else ``""``.

        A draining node (MIXED+DRAIN) still runs its jobs but starts none: its idle
        GPUs are as unavailable as a drained node's."""
        flags = set(self.state.upper().split("+"))
        if flags & {"DOWN", "FAIL", "FUTURE"}:
            return "down"
        if flags & {"DRAIN", "DRAINED", "DRAINING", "MAINT", "REBOOT_REQUESTED"}:
            return "drained"
        return ""


def nodes(*, env: Mapping[str, str] | None = None) -> list[NodeInfo]:
    """Every node Slurm has (one ``scontrol -o show node``): GPUs from ``Gres=``
    (``gpu:2``, ``gpu:a100:2(S:0-1)``, several types added up), state and reason."""
    out: list[NodeInfo] = []
    for line in slurm(["scontrol", "-o", "show", "node"], env=env).stdout.splitlines():
        name = re.search(r"\bNodeName=(\S+)", line)
        if not name:
            continue
        gres = re.search(r"\bGres=(\S*)", line)
        text = re.sub(r"\([^)]*\)", "", gres.group(1)) if gres else ""
        count = sum(int(n) for n in _GPU_GRES.findall(text))
        reason = _field(line, "Reason")
        reason = "" if reason in ("(null)", "None") else reason
        out.append(NodeInfo(name.group(1), count, _field(line, "State"), reason))
    return out


def _field(line: str, key: str) -> str:
    """One ``Key=value`` of a ``scontrol -o`` line; a value may hold spaces."""
    m = re.search(rf"(?:^|\s){key}=(.*?)(?=\s[A-Z][A-Za-z:/_]*=|$)", line)
    return m.group(1).strip() if m else ""


def job_details(job_id: str, *, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``Reason``, ``ExitCode``, ``StdErr``, ``StdOut``, ``WorkDir`` of a job the
    controller still knows (MinJobAge after it ended); empty when it forgot it."""
    try:
        res = slurm(["scontrol", "-d", "-o", "show", "job", job_id], env=env, check=False)
    except AcbslurmError:
        return {}
    if res.returncode != 0 or not res.stdout.strip():
        return {}
    line = res.stdout.splitlines()[0]
    keys = ("Reason", "ExitCode", "StdErr", "StdOut", "WorkDir")
    return {k: v for k in keys if (v := _field(line, k)) and v not in ("None", "(null)")}


@frozen
class GpuSlot:
    """One GPU Slurm manages: the running job holding it, or why no job can get it."""

    node: str
    index: int
    job: JobInfo | None
    unavailable: str = ""  # the node's: "drained", "down" (NodeInfo.unavailable)
    reason: str = ""  # the node's Reason=, when unavailable

    @property
    def uuid(self) -> str | None:
        """The UUID of this GPU as its job's record (or AdminComment devices) names it;
        None when no job holds it or nothing recorded it."""
        job = self.job
        if job is None:
            return None
        for g in job.gpus:
            if g.index == self.index and g.node in ("", self.node):
                return g.uuid or None
        return None

    def as_json(self) -> dict[str, Any]:
        """`status --gpus --json`'s object for this GPU."""
        job = self.job
        return {
            "node": self.node,
            "index": self.index,
            "uuid": self.uuid,
            "job_id": job.job_id if job else None,
            "user": (job.user or None) if job else None,
            "elapsed_s": elapsed_seconds(job.elapsed) if job else None,
            "name": (job.name or None) if job else None,
            "unavailable": self.unavailable or None,
            "node_reason": self.reason or None,
        }


# complexity: the count is the loops' and the comprehension's clauses: one pass over the running
# jobs, one over the nodes' GPUs, nothing a helper would name better than the comments do.
def gpu_slots(*, record_dir: str = "", env: Mapping[str, str] | None = None) -> list[GpuSlot]:
    """Every GPU Slurm manages, with the running job holding it (or None) and, for a
    drained or down node, that state and the reason: its idle GPUs are not free.

    Two listings: the nodes (``Gres=``, ``State=``, ``Reason=``) and the running jobs
    with their GPU indices (one ``scontrol`` for all). A job on several nodes is shown
    on each with its indices.
    """
    held: dict[tuple[str, int], JobInfo] = {}  # the job holding each (node, GPU index)
    for job in query_jobs(record_dir=record_dir, env=env):
        if job.state not in HOLDING_STATES or not job.node:
            continue
        for g in job.gpus:  # a job on several nodes: exactly its GPUs on each
            for node in [g.node] if g.node else expand_hostlist(job.node):
                if g.index is not None:
                    held[(node, g.index)] = job
    return [
        GpuSlot(
            n.name, idx, held.get((n.name, idx)), n.unavailable, n.reason if n.unavailable else ""
        )
        for n in sorted(nodes(env=env), key=lambda n: n.name)
        for idx in range(n.gpus)
    ]


def show_config(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """What slurmctld says its configuration is (``scontrol show config``): lower-cased
    keys, values as printed; ``(null)`` values left out. Raises ``SlurmError``."""
    out = slurm(["scontrol", "show", "config"], env=env, timeout=10).stdout
    values: dict[str, str] = {}
    for raw in out.splitlines():
        key, sep, value = raw.partition(" = ")
        value = value.strip()
        if sep and value != "(null)":
            values.setdefault(key.strip().lower(), value)
    return values


def slurmctld_up(*, env: Mapping[str, str] | None = None, timeout: float = 5.0) -> bool:
    """Whether slurmctld answers (``scontrol ping``: ``Slurmctld(primary) at HOST is UP``)."""
    res = slurm(["scontrol", "ping"], env=env, timeout=timeout, check=False)
    return res.returncode == 0 and "UP" in res.stdout
