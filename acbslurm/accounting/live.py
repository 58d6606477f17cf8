"""The devices of running jobs, from slurmctld.

The prolog writes a job's GPUs into its AdminComment while the job runs, but slurmctld
sends that to slurmdbd only with the job's end: in the database a running job has no
devices yet. The report asks slurmctld once (``scontrol show job -o``, all jobs in one
call) the first time it meets a running GPU job without devices, and takes them from
there. Where slurmctld cannot be asked (no Slurm commands on this host, the controller
down), running jobs keep no devices, as before: the report still answers.
"""

from __future__ import annotations

import re

from acbslurm.accounting.usage import devices_text
from acbslurm.errors import CommandError
from acbslurm.slurm.gpu_history import admin_comment

_JOB_ID = re.compile(r"(?:^|\s)JobId=([0-9]+)(?=\s|$)")


class LiveDevices:
    def __init__(self) -> None:
        self._by_job: dict[int, str] | None = None

    def devices(self, job_id: int) -> str:
        """``node:index=uuid,...`` of the running job ``job_id`` ("" when unknown)."""
        if self._by_job is None:
            self._by_job = _read()
        return self._by_job.get(job_id, "")


def _read() -> dict[int, str]:
    from acbslurm.slurm.commands import slurm

    try:
        out = slurm(["scontrol", "show", "job", "-o"], timeout=10, controller=True).stdout
    except (CommandError, OSError):
        return {}
    return parse_show_jobs(out)


def parse_show_jobs(text: str) -> dict[int, str]:
    """Job id -> its devices, from ``scontrol show job -o``'s lines."""
    by_job = {}
    for line in text.splitlines():
        m = _JOB_ID.search(line)
        found = devices_text(admin_comment(line)) if m else ""
        if m and found:
            by_job[int(m.group(1))] = found
    return by_job
