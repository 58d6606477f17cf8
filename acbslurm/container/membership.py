"""Is this process really part of Slurm job N? (SLURM_JOB_ID alone is just a variable.)

A job's processes descend from a root-owned ``slurmstepd: [N.batch]`` (or ``[N.0]``,
``[N.extern]``...). A user can set any environment and rename their own processes, but
cannot create a root-owned ancestor, so walking up /proc proves membership cheaply.
"""

from __future__ import annotations

from acbslurm.procfs import stepd_job_of_ancestors


def in_job(job_id: str) -> bool:
    return stepd_job_of_ancestors() == job_id


__all__ = ["in_job", "stepd_job_of_ancestors"]
