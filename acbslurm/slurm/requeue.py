"""A job asks Slurm to run it again: ``scontrol requeue`` of its own id.

A user may requeue their own batch job (job_mgr.c's job_requeue checks the owner);
Slurm kills what still runs of it, records the run as REQUEUED, and starts it again
when it is eligible (a requeued job waits for its begin time, about two minutes by
default), with ``SLURM_RESTART_COUNT`` one higher. A job submitted ``--no-requeue`` (or
on a site with ``JobRequeue=0`` and no ``--requeue``) is refused: the error says so.
"""

from __future__ import annotations

from collections.abc import Mapping

from acbslurm.errors import SlurmError
from acbslurm.slurm.commands import slurm

# s: the controller answers at once; a busy one is given a little longer.
REQUEUE_TIMEOUT = 20.0


def requeue(job_id: str, env: Mapping[str, str] | None = None) -> str:
    """Ask Slurm to requeue ``job_id``; "" when it took it, else why not."""
    try:
        res = slurm(["scontrol", "requeue", job_id], env=env, check=False, timeout=REQUEUE_TIMEOUT)
    except SlurmError as exc:
        return str(exc)
    if res.returncode == 0:
        return ""
    said = (res.stderr or res.stdout).strip()
    return said or f"scontrol requeue exited {res.returncode}"
