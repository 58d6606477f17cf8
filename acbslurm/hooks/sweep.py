"""Remove every container a job left behind, in each Docker daemon that may hold one."""

from __future__ import annotations

from dataclasses import dataclass, field

from acbslurm.dockerapi.engine import DaemonUnreachable, EngineApi
from acbslurm.errors import DockerError
from acbslurm.jobrecord import JOB_LABEL


@dataclass
class SweepResult:
    removed: list[str] = field(default_factory=list)
    # Daemons that answered but where a container could not be listed or removed:
    # a finished job may still hold its GPU there.
    failures: list[str] = field(default_factory=list)
    # Daemons nobody answers for: their containers may still run (a crashed dockerd
    # leaves them to containerd-shim), so "nothing found" is unknown, not none.
    unreachable: list[str] = field(default_factory=list)


def sweep_job_containers(job_id: str, docker_hosts: list[str], timeout: float) -> SweepResult:
    """Force-remove containers labelled ``acbslurm.job_id=<job_id>``; never raises."""
    result = SweepResult()
    for host in docker_hosts:
        try:
            api = EngineApi(host, timeout)
            containers = api.containers_with_label(f"{JOB_LABEL}={job_id}")
        except DaemonUnreachable:
            result.unreachable.append(host)
            continue
        except DockerError as exc:
            result.failures.append(str(exc))
            continue
        for c in containers:
            cid = str(c.get("Id", ""))
            try:
                api.remove_container(cid)
                result.removed.append(cid[:12])
            except DockerError as exc:
                result.failures.append(str(exc))
    return result
