"""Where a job's own broker listens on a node: known to the broker, its clients and the
epilog (which removes what a broker killed hard leaves behind)."""

from __future__ import annotations

import os


def job_socket_path(job_id: str, tmp: str = "/tmp") -> str:
    """The per-job broker's gRPC socket."""
    return os.path.join(tmp, f"acbslurm-broker-{job_id}.sock")


def lane_path(broker_socket: str) -> str:
    """Where the local lane of the broker listening on ``broker_socket`` is."""
    return broker_socket + ".lane"
