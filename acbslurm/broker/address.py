"""Broker addresses: ``unix:PATH`` or ``HOST:PORT``, and the default one.

Inside a Slurm job the default is a per-job socket, so that the broker a job starts
and the programs of that job find each other without configuration.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from acbslurm.errors import ConfigError
from acbslurm.jobsockets import job_socket_path
from acbslurm.units import is_ascii_int


def job_socket(job_id: str) -> str:
    return f"unix:{job_socket_path(job_id)}"


def default_address(env: Mapping[str, str] | None = None) -> str:
    """``ACBSLURM_BROKER_ADDRESS``, else the job's socket in a Slurm job, else settings."""
    env = os.environ if env is None else env
    explicit = env.get("ACBSLURM_BROKER_ADDRESS")
    if explicit:
        return explicit
    if env.get("SLURM_JOB_ID"):
        return job_socket(env["SLURM_JOB_ID"])
    from acbslurm.config import load_settings

    return load_settings().broker_address


def parse_address(address: str) -> str:
    """Validate ``address`` and return it in gRPC's spelling (``unix:PATH``/``HOST:PORT``)."""
    if address.startswith("unix:"):
        path = address[len("unix:") :]
        if path.startswith("//"):
            path = path[2:]
        if not path.startswith("/"):
            raise ConfigError(f"broker address {address!r}: unix socket path must be absolute")
        return f"unix:{path}"
    host, sep, port = address.rpartition(":")
    if not sep or not host or not is_ascii_int(port) or not 0 < int(port) < 65536:
        raise ConfigError(
            f"broker address {address!r}: expected unix:/PATH or HOST:PORT (e.g. 127.0.0.1:50077)"
        )
    return address


def socket_path(address: str) -> str | None:
    """The filesystem path of a unix address, else None."""
    parsed = parse_address(address)
    return parsed[len("unix:") :] if parsed.startswith("unix:") else None
