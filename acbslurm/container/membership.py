"""Is this process really part of Slurm job N? (SLURM_JOB_ID alone is just a variable.)

A job's processes descend from a root-owned ``slurmstepd: [N.batch]`` (or ``[N.0]``,
``[N.extern]``...). A user can set any environment and rename their own processes, but
cannot create a root-owned ancestor, so walking up /proc proves membership cheaply.
"""

from __future__ import annotations

import os

from acbslurm.procfs import parent_pid, read_bytes, real_uid


def _parent_and_uid(pid: int) -> tuple[int, int]:
    return parent_pid(read_bytes(f"/proc/{pid}/stat")), real_uid(read_bytes(f"/proc/{pid}/status"))


def stepd_job_of_ancestors(pid: int | None = None) -> str | None:
    """The job id of the nearest root-owned slurmstepd above ``pid``, or None."""
    pid = os.getpid() if pid is None else pid
    seen = 0
    while pid > 1 and seen < 64:
        seen += 1
        ppid, uid = _parent_and_uid(pid)
        cmd = read_bytes(f"/proc/{pid}/cmdline").split(b"\0", 1)[0].decode(errors="replace")
        if uid == 0 and cmd.startswith("slurmstepd: ["):
            return cmd[len("slurmstepd: [") :].split(".", 1)[0].split("]", 1)[0]
        pid = ppid
    return None


def in_job(job_id: str) -> bool:
    return stepd_job_of_ancestors() == job_id
