"""The devices of running jobs, from slurmctld.

The prolog writes a job's GPUs into its AdminComment while the job runs, but slurmctld
sends that to slurmdbd only with the job's end: in the database a running job has no
devices yet. The report asks slurmctld once (``squeue -O JobID,admin_comment``, all
jobs in one call: never ``scontrol show job`` text, where a job's name can hold
``AdminComment=``) the first time it meets a running GPU job without devices, and takes them from
there. Where slurmctld cannot be asked (no Slurm commands on this host, the controller
down), running jobs keep no devices, as before: the report still answers.
"""

from __future__ import annotations

from acbslurm.accounting.gpuseconds import devices_text
from acbslurm.errors import CommandError
from acbslurm.slurm.commands import slurm
from acbslurm.units import is_ascii_int

# The job's own id, then its AdminComment (an admin's text and acbslurm's words): the
# comment last, so that it is split from the id at the first "|".
SQUEUE_FORMAT = "JobID:|,admin_comment:"


class LiveDevices:
    def __init__(self) -> None:
        self._by_job: dict[int, str] | None = None

    def devices(self, job_id: int) -> str:
        """``node:index=uuid,...`` of the running job ``job_id`` ("" when unknown)."""
        if self._by_job is None:
            self._by_job = _read()
        return self._by_job.get(job_id, "")


def _read() -> dict[int, str]:
    try:
        argv = ["squeue", "-h", "-t", "all", "-O", SQUEUE_FORMAT]
        out = slurm(argv, timeout=10, controller=True).stdout
    except (CommandError, OSError):
        return {}
    return parse_show_jobs(out)


def parse_show_jobs(text: str) -> dict[int, str]:
    """Job id -> its devices, from ``squeue -h -O SQUEUE_FORMAT``'s rows."""
    by_job = {}
    for row in text.split("\n"):
        job_id, sep, comment = row.partition("|")
        found = devices_text(comment) if sep and is_ascii_int(job_id.strip()) else ""
        if found:
            by_job[int(job_id.strip())] = found
    return by_job
