"""Where a job's container publishes its ports (`acbslurm run -p`), said and kept.

The run says each on stderr once the container started (``published 8888/tcp at
10.0.0.5:18888 (vm-1)``, at the node's address as its name resolves there; for a
container with the node's network, where it is reached), and keeps them, while the
container runs, in a file of the job's working directory (``jobfiles``:
``acbslurm-ports-JOBID.NODE.PID.json``, one per run, so that the steps and nodes of a
job never write one file) that `acbslurm status` reads on the login node. The file goes
when the run ends.
"""

from __future__ import annotations

import os

from acbslurm import jobfiles

TYPE_CHECKING = False  # a lean-path module: CONTRIBUTING.md, "Lean imports"
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

PREFIX = "acbslurm-ports-"


# How long the node's own name may take to resolve (a name only DNS knows, with DNS
# down, would take resolv.conf's 5 s per try): past it the name is shown as it is.
RESOLVE_S = 1.0


def node_address(node: str) -> str | None:
    """The node's address as its own name resolves on it (Slurm's NodeName, which the
    site's hosts or DNS map to the node's NodeAddr): what another machine reaches a
    port published on every address at, where the login node may not resolve the name
    (the sandbox's node networks; sites whose nodes are named only in slurm.conf).
    None: unresolved, or only to a loopback or link-local address (Debian's
    ``127.0.1.1 HOST`` line), where the name is the better thing to show."""
    import ipaddress
    import socket
    import threading

    found: list[str] = []

    def look() -> None:
        try:
            infos = socket.getaddrinfo(node, None, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            return
        found.extend(str(i[4][0]) for i in infos)

    t = threading.Thread(target=look, name="acbslurm-resolve", daemon=True)
    t.start()
    t.join(RESOLVE_S)
    for a in sorted(list(found), key=lambda a: ":" in a):  # IPv4 first
        try:
            ip = ipaddress.ip_address(a.split("%")[0])
        except ValueError:
            continue
        if not (ip.is_loopback or ip.is_link_local or ip.is_unspecified):
            return f"[{a}]" if ip.version == 6 else a
    return None


def published(
    inspected: dict[str, Any], node: str, address: str | None = None
) -> list[dict[str, str]]:
    """Each published port of a started container: ``{"port": "8888/tcp", "address":
    "10.0.0.5:18888"}`` (the node's port, the daemon's pick for ``-p 8888``, at the
    node's ``address``, or its name where that is None); an address other than every
    one's is named (``10.0.0.9:18888 of vm-1``); IPv4 and IPv6 of one port once."""
    ports = (inspected.get("NetworkSettings") or {}).get("Ports") or {}
    out: list[dict[str, str]] = []
    for key in sorted(ports):
        for b in ports[key] or []:
            ip = b.get("HostIp") or ""
            where = (
                f"{address or node}:{b.get('HostPort')}"
                if ip in ("", "0.0.0.0", "::")  # noqa: S104 - Docker's "every address"
                else f"{ip}:{b.get('HostPort')} of {node}"
            )
            entry = {"port": key, "address": where}
            if entry not in out:
                out.append(entry)
    return out


# The port of a host-network container that exposes none: any the program opens.
HOST_NETWORK = "host network"


def host_network(
    inspected: dict[str, Any], node: str, address: str | None = None
) -> list[dict[str, str]]:
    """Where a container with the node's network (``--network host``) is reached: each
    port its image exposes (``EXPOSE``) at the node's ``address`` (its name where
    None), else the address alone with the port ``host network``: the program's own
    ports are the node's, whichever it opens."""
    exposed = sorted((inspected.get("Config") or {}).get("ExposedPorts") or {})
    where = address or node
    if not exposed:
        return [{"port": HOST_NETWORK, "address": where}]
    return [{"port": p, "address": f"{where}:{p.split('/')[0]}"} for p in exposed]


def lines(entries: list[dict[str, str]], node: str = "") -> list[str]:
    """``acbslurm: published 8888/tcp at 10.0.0.5:18888 (vm-1)`` per container port
    (the node named where no address names it)."""
    by_port: dict[str, list[str]] = {}
    for e in entries:
        by_port.setdefault(e["port"], []).append(e["address"])
    return [f"acbslurm: {said(p, ', '.join(a))}{named(node, a)}" for p, a in by_port.items()]


def said(port: str, where: str, job: str = "") -> str:
    """``published 8888/tcp at ADDR`` (the run's words; ``job 7 publishes ...`` for
    `status`), or where the container has the node's network, that and its address."""
    if port == HOST_NETWORK:
        who = f"job {job}'s container" if job else "the container"
        return f"{who} has the node's network: its ports are reached at {where}"
    return f"job {job} publishes {port} at {where}" if job else f"published {port} at {where}"


def named(node: str, addresses: list[str]) -> str:
    """`` (vm-1)`` where none of ``addresses`` names ``node``, else nothing."""
    told = any(
        a == node or a.startswith(f"{node}:") or a.endswith(f" of {node}") for a in addresses
    )
    return f" ({node})" if node and not told else ""


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


def by_job(names: Iterable[str]) -> dict[str, list[str]]:
    """A working directory's port files (its listing ``names``) by job id, each job's
    in order: one pass over the listing, however many of the caller's jobs share it."""
    out: dict[str, list[str]] = {}
    for name in sorted(names):
        if name.startswith(PREFIX) and name.endswith(".json"):
            out.setdefault(name[len(PREFIX) :].split(".", 1)[0], []).append(name)
    return out


def of_job(job_id: str, names: list[str], folder: str) -> list[dict[str, str]]:
    """The ports the runs of ``job_id`` keep in ``folder`` (its files ``names``, from
    ``by_job``): each with its ``node``."""
    out: list[dict[str, str]] = []
    for name in names:
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
