"""Where a job's container publishes its ports (`acbslurm run -p`), said and kept.

The run says each on stderr once the container started (``published 8888/tcp at
vm-1:18888``), and keeps them, while the container runs, in a file of the job's working
directory (``jobfiles``: ``acbslurm-ports-JOBID.NODE.PID.json``, one per run, so that
the steps and nodes of a job never write one file) that `acbslurm status` reads on the
login node. The file goes when the run ends.
"""

from __future__ import annotations

import os

from acbslurm import jobfiles

# On `acbslurm run`'s path: no typing at run time (tests/unit/cli/test_run_fast.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PREFIX = "acbslurm-ports-"


def published(inspected: dict[str, Any], node: str) -> list[dict[str, str]]:
    """Each published port of a started container: ``{"port": "8888/tcp", "address":
    "vm-1:18888"}`` (the node's port, the daemon's pick for ``-p 8888``); an address
    other than every one's is named (``10.0.0.5:18888 of vm-1``); IPv4 and IPv6 of
    one port once."""
    ports = (inspected.get("NetworkSettings") or {}).get("Ports") or {}
    out: list[dict[str, str]] = []
    for key in sorted(ports):
        for b in ports[key] or []:
            ip = b.get("HostIp") or ""
            where = (
                f"{node}:{b.get('HostPort')}"
                if ip in ("", "0.0.0.0", "::")  # noqa: S104 - Docker's "every address"
                else f"{ip}:{b.get('HostPort')} of {node}"
            )
            entry = {"port": key, "address": where}
            if entry not in out:
                out.append(entry)
    return out


def lines(entries: list[dict[str, str]]) -> list[str]:
    """``acbslurm: published 8888/tcp at vm-1:18888`` per container port."""
    by_port: dict[str, list[str]] = {}
    for e in entries:
        by_port.setdefault(e["port"], []).append(e["address"])
    return [f"acbslurm: published {p} at {', '.join(a)}" for p, a in by_port.items()]


def ports_file(work_dir: str, job_id: str, node: str, pid: int) -> str:
    return os.path.join(work_dir, f"{PREFIX}{job_id}.{node}.{pid}.json")


def keep(job_id: str, node: str, entries: list[dict[str, str]]) -> str | None:
    """The file for `status` in the working directory (this process's, as the job
    started it); its path, or None when it could not be written (said on stderr: the
    container runs on, reachable as said)."""
    path = ports_file(os.getcwd(), job_id, node, os.getpid())
    data = {
        "job_id": job_id,
        "node": node,
        "step": os.environ.get("SLURM_STEP_ID"),
        "ports": entries,
    }
    try:
        jobfiles.write_private(path, data)
    except jobfiles.JobFileError as exc:
        # Imported here: `acbslurm status` imports this module, and needs none of it.
        from acbslurm.container.streams import tell

        tell(f"acbslurm: warning: `acbslurm status` will not show the published ports: {exc}")
        return None
    return path


def forget(path: str | None) -> None:
    """The run's file goes as the run ends (``path`` None: none was kept)."""
    if path:
        jobfiles.remove(path)


def of_job(job_id: str, names: frozenset[str] | None, folder: str) -> list[dict[str, str]]:
    """The ports every run of ``job_id`` keeps in ``folder`` (its listing ``names``;
    None: it could not be listed, so nothing is found): each with its ``node``."""
    mine = sorted(
        n for n in names or () if n.startswith(f"{PREFIX}{job_id}.") and n.endswith(".json")
    )
    out: list[dict[str, str]] = []
    for name in mine:
        data = jobfiles.read_private(os.path.join(folder, name))
        if data and str(data.get("job_id")) == job_id:
            out.extend(_entries(data))
    return out


def _entries(data: dict[str, Any]) -> list[dict[str, str]]:
    node = str(data.get("node", ""))
    return [
        {"node": node, "port": p["port"], "address": str(p.get("address", ""))}
        for p in data.get("ports") or []
        if isinstance(p, dict) and isinstance(p.get("port"), str)
    ]
