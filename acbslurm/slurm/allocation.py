"""The CPUs and memory Slurm gave a job on this node (the prolog's environment lacks them).

Read from ``scontrol show job -d -o``: its per-node detail (``Nodes=n1 CPU_IDs=0-1
Mem=2048``) and, for a one-node job without detail, ``NumCPUs`` and ``TRES mem=``.
"""

from __future__ import annotations

from dataclasses import dataclass

from acbslurm.slurm.hostlist import expand_hostlist
from acbslurm.units import expand_ranges, is_ascii_int, size_bytes


@dataclass(frozen=True)
class Allocation:
    cpus: int = 0  # 0: unknown
    mem_mb: int = 0  # 0: unknown


def count_cpu_ids(spec: str) -> int:
    """``0-1,4`` -> 3."""
    return len(expand_ranges(spec))


def mem_to_mb(value: str) -> int:
    """``2048`` / ``2048M`` / ``2G`` (scontrol's memory) -> megabytes."""
    return size_bytes(value, default_unit="M") // 1024**2


def parse_scontrol_job(text: str, node: str) -> Allocation:
    """The allocation on ``node`` from one ``scontrol show job -d -o`` line."""
    tokens = text.split()
    fields: dict[str, str] = {}
    for i, tok in enumerate(tokens):
        key, _, value = tok.partition("=")
        if key == "Nodes" and i + 1 < len(tokens) and tokens[i + 1].startswith("CPU_IDs="):
            if node in expand_hostlist(value):
                cpus = count_cpu_ids(tokens[i + 1].partition("=")[2])
                mem = 0
                if i + 2 < len(tokens) and tokens[i + 2].startswith("Mem="):
                    mem = mem_to_mb(tokens[i + 2].partition("=")[2])
                return Allocation(cpus, mem)
            continue
        fields.setdefault(key, value)
    if fields.get("NumNodes", "").split("-")[0] != "1":
        return Allocation()
    cpus = int(fields["NumCPUs"]) if is_ascii_int(fields.get("NumCPUs", "")) else 0
    mem = 0
    for item in fields.get("TRES", "").split(","):
        k, _, v = item.partition("=")
        if k == "mem" and v:
            mem = mem_to_mb(v)
    return Allocation(cpus, mem)


def job_allocation(job_id: str, node: str, timeout: float = 5.0) -> Allocation:
    """Ask slurmctld; an unknown allocation (0, 0) when it cannot answer in time."""
    from acbslurm.errors import CommandError
    from acbslurm.slurm.commands import slurm

    try:
        res = slurm(["scontrol", "show", "job", "-d", "-o", job_id], timeout=timeout)
    except CommandError:
        return Allocation()
    try:
        return parse_scontrol_job(res.stdout, node)
    except ValueError:  # a format this parser does not know: limits are not worth a drain
        return Allocation()
