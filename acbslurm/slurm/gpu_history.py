"""Which GPUs (UUIDs) a job used, kept by Slurm itself after the job is gone.

slurmdbd 22.05 stores a job's GPU *count* only, and the prolog's job record is deleted by
the epilog, so "which GPU did job 42 use" had no answer once job 42 ended. The prolog
therefore writes the exact devices into the job's ``AdminComment``: a field only an
admin (the prolog runs as root) may set, which slurmctld hands to slurmdbd with the job
and the report reads back from the ``admin_comment`` column. The comment an admin gave
the job is kept; acbslurm adds one token, ``acbslurm:gpus=NODE:INDEX=UUID,...``.

A job on several nodes has one token per node; their prologs run at once, so a node's
token can be lost in a race (one read-modify-write each). One-node jobs, the common
case for GPU work here, are exact.
"""

from __future__ import annotations

import re

from acbslurm.units import is_ascii_int

PREFIX = "acbslurm:gpus="
_TOKEN = re.compile(r"acbslurm:gpus=(\S+)")
_ADMIN = re.compile(r"\bAdminComment=(.*?)(?=\s[A-Z][A-Za-z]*=|$)")


def gpu_token(node: str, indices: list[int], uuids: list[str]) -> str:
    """``acbslurm:gpus=vm:0=GPU-a,vm:1=GPU-b`` (Slurm's index, or ``-`` when Slurm gave
    UUIDs only)."""
    idx: list[str] = [str(i) for i in indices] or ["-"] * len(uuids)
    return PREFIX + ",".join(f"{node}:{i}={u}" for i, u in zip(idx, uuids, strict=True))


def merged_comment(current: str, node: str, token: str) -> str:
    """``current`` with this node's earlier token (a requeued run) replaced by ``token``."""
    kept = [
        t
        for t in current.split()
        if not (t.startswith(PREFIX) and t[len(PREFIX) :].startswith(f"{node}:"))
    ]
    return " ".join([*kept, token]).strip()


def admin_comment(show_job: str) -> str:
    """The ``AdminComment`` of one ``scontrol show job -o`` line ("" when (null))."""
    m = _ADMIN.search(show_job)
    value = m.group(1).strip() if m else ""
    return "" if value in ("(null)", "") else value


def parse_gpus(comment: str | None) -> list[dict[str, str | int | None]]:
    """The devices in a stored ``admin_comment``: ``[{"node", "index", "uuid"}]``."""
    out: list[dict[str, str | int | None]] = []
    for token in _TOKEN.findall(comment or ""):
        for item in token.split(","):
            where, _, uuid = item.partition("=")
            node, _, index = where.rpartition(":")
            if node and uuid:
                out.append(
                    {
                        "node": node,
                        "index": int(index) if is_ascii_int(index) else None,
                        "uuid": uuid,
                    }
                )
    return out


def record_job_gpus(
    job_id: str,
    node: str,
    indices: list[int],
    uuids: list[str],
    *,
    shown: str | None = None,
    bin_dir: str = "",
    timeout: float = 5.0,
) -> None:
    """Add this node's GPUs to the job's AdminComment. ``shown``: the job's
    ``scontrol show job -o`` line when the caller has it already (the prolog does)."""
    from acbslurm.slurm.commands import slurm

    if not uuids:
        return
    if shown is None:
        argv = ["scontrol", "show", "job", "-o", job_id]
        shown = slurm(argv, timeout=timeout, bin_dir=bin_dir).stdout
    comment = merged_comment(admin_comment(shown), node, gpu_token(node, indices, uuids))
    argv = ["scontrol", "update", f"job={job_id}", f"AdminComment={comment}"]
    slurm(argv, timeout=timeout, bin_dir=bin_dir)
