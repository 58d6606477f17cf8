"""Remove every container a job left behind, in each Docker daemon that may hold one."""

from __future__ import annotations

import time
from collections.abc import Callable

from acbslurm.dockerapi.engine import DaemonTimeout, DaemonUnreachable, EngineApi
from acbslurm.errors import DockerError
from acbslurm.jobrecord import JOB_LABEL
from acbslurm.values import field, mutable

# A daemon working through a burst of starts may answer a list or a removal after the
# hook's timeout; one that still answers its ping is asked again rather than taken for
# stuck (the node would be drained for it), until this many seconds after the sweep
# began, for every daemon together. Past it nothing more is asked: the hook's own
# deadline (hooks/common.py, HOOK_DEADLINE_S) must leave the steps after the sweep (the
# GPU fence, the kill of processes still holding the job's GPUs, the record's removal)
# the time to run, whatever a user's daemon does.
BUSY_PATIENCE = 15.0
PING_TIMEOUT = 2.0

TYPE_CHECKING = False  # a lean-path module: CONTRIBUTING.md, "Lean imports"
if TYPE_CHECKING:
    from typing import TypeVar

    T = TypeVar("T")


def _asked_again(api: EngineApi, fn: Callable[[str], T], arg: str, until: float) -> T:
    """``fn(arg)`` (a list or a removal: both may be asked twice), again after a timeout
    while the daemon pings and ``until`` (monotonic) has not passed."""
    while True:
        try:
            return fn(arg)
        except DaemonTimeout:
            if time.monotonic() > until or not api.pings(PING_TIMEOUT):
                raise


@mutable
class SweepResult:
    removed: list[str] = field(default_factory=list)
    # Daemons that answered but where a container could not be listed or removed:
    # a finished job may still hold its GPU there.
    failures: list[str] = field(default_factory=list)
    # Daemons nobody answers for: their containers may still run (a crashed dockerd
    # leaves them to containerd-shim), so "nothing found" is unknown, not none.
    unreachable: list[str] = field(default_factory=list)


def sweep_job_containers(
    job_id: str,
    docker_hosts: list[tuple[str, int]],
    timeout: float,
    patience: float = BUSY_PATIENCE,
) -> SweepResult:
    """Force-remove containers labelled ``acbslurm.job_id=<job_id>``; never raises.
    ``docker_hosts``: each daemon's address and the uid that must serve it (the job's
    user, root for a system daemon): a daemon served by another uid is a failure, asked
    nothing. ``patience``: how long busy daemons (they ping) are asked again, in all."""
    result = SweepResult()
    until = time.monotonic() + patience
    for host, owner in docker_hosts:
        if time.monotonic() > until:
            result.failures.append(f"Docker at {host}: not asked, the sweep's time is spent")
            continue
        try:
            api = EngineApi(host, timeout, owner=owner)
            label = f"{JOB_LABEL}={job_id}"
            containers = _asked_again(api, api.containers_with_label, label, until)
        except DaemonUnreachable:
            result.unreachable.append(host)
            continue
        except DockerError as exc:
            result.failures.append(str(exc))
            continue
        for c in containers:
            if time.monotonic() > until:
                result.failures.append(
                    f"Docker at {host}: containers left, the sweep's time is spent"
                )
                break
            cid = c.get("Id")
            if not isinstance(cid, str) or not cid:
                result.failures.append(f"Docker at {host}: a listed container has no id")
                continue
            try:
                _asked_again(api, api.remove_container, cid, until)
                result.removed.append(cid[:12])
            except DockerError as exc:
                result.failures.append(str(exc))
    return result
