"""Remove the per-job broker's sockets a job left behind (a broker killed hard).

A broker started inside a job listens on ``/tmp/acbslurm-broker-<job>.sock`` and
``.sock.lane`` (``jobsockets.py``) and removes them when it stops cleanly; after a
SIGKILL they stay. The epilog runs as root in a world-writable directory, so it
removes a path only when it is a socket (never following a link) owned by the job's
user: a file someone planted under that name is left alone.
"""

from __future__ import annotations

import os
import stat

from acbslurm.jobsockets import job_socket_path, lane_path


def job_broker_sockets(job_id: str, tmp: str = "/tmp") -> list[str]:
    base = job_socket_path(job_id, tmp)
    return [base, lane_path(base)]


def remove_broker_sockets(job_id: str, uid: int, tmp: str = "/tmp") -> list[str]:
    """Unlink the job's broker sockets that ``uid`` owns; returns those removed."""
    removed = []
    for path in job_broker_sockets(job_id, tmp):
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISSOCK(st.st_mode) or st.st_uid != uid:
            continue
        try:
            os.unlink(path)
        except OSError:
            continue
        removed.append(path)
    return removed
