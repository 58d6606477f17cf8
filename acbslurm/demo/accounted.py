"""The demo's jobs as `acbslurm report` reads them from slurmdbd's database.

slurmctld hands finished jobs to slurmdbd asynchronously, so the report waits until
sacct (which reads slurmdbd, unlike squeue) has every job in a final state.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from acbslurm import proc
from acbslurm.slurm.jobs import sacct_jobs
from acbslurm.slurm.jobtypes import JobInfo

STORE_TIMEOUT = 30.0


def all_final(job_ids: Sequence[str], rows: Sequence[JobInfo]) -> bool:
    """Whether sacct's rows show every one of ``job_ids`` in a final state."""
    return set(job_ids) <= {j.job_id for j in rows if j.finished}


def wait_until_stored(
    job_ids: Sequence[str],
    *,
    env: Mapping[str, str] | None,
    timeout: float = STORE_TIMEOUT,
    interval: float = 0.5,
) -> bool:
    """Wait until slurmdbd has stored every job as ended; False after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        # check=False: slurmdbd may be busy for a moment; the deadline bounds the wait.
        if all_final(job_ids, sacct_jobs(job_ids, env=env, check=False)):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def usage_report(
    acbslurm_cmd: Sequence[str], user: str, since: int, *, env: Mapping[str, str] | None
) -> str:
    """`acbslurm report --by job` for ``user``'s jobs since ``since``, as text."""
    argv = [*acbslurm_cmd, "report", "--user", user, "--start", f"@{since}", "--by", "job"]
    return proc.run(argv, env=env, timeout=60).stdout.rstrip()
