"""Broker addresses: ``unix:PATH`` or ``HOST:PORT``, and the default one.

Inside a Slurm job the default is a per-job socket, so that the broker a job starts
and the programs of that job find each other without configuration.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from acbslurm.config import load_settings
from acbslurm.errors import ConfigError
from acbslurm.jobrecord import JOB_ID
from acbslurm.jobsockets import check_socket, job_dir, job_socket_path
from acbslurm.units import is_ascii_int


def job_socket(job_id: str, base: str) -> str:
    return f"unix:{job_socket_path(job_id, base)}"


def default_address(env: Mapping[str, str] | None = None) -> str:
    """``ACBSLURM_BROKER_ADDRESS``, else the job's socket in a Slurm job, else settings.

    The job's socket is in its runtime directory, which the acbslurm prolog makes; where
    that prolog does not run, in the user's own ``XDG_RUNTIME_DIR``.
    """
    env = os.environ if env is None else env
    explicit = env.get("ACBSLURM_BROKER_ADDRESS")
    if explicit:
        return explicit

    settings = load_settings()
    job_id = env.get("SLURM_JOB_ID")
    if not job_id:
        return settings.broker_address
    if not JOB_ID.match(job_id):
        raise ConfigError(f"SLURM_JOB_ID={job_id!r} is not a Slurm job id")
    xdg = env.get("XDG_RUNTIME_DIR")
    if not os.path.isdir(job_dir(job_id, settings.job_runtime_dir)) and xdg:
        return f"unix:{os.path.join(xdg, f'acbslurm-broker-{job_id}.sock')}"
    return job_socket(job_id, settings.job_runtime_dir)


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


def check_address(address: str) -> str:
    """``parse_address``, and for a unix socket the ownership check of jobsockets."""
    parsed = parse_address(address)
    path = socket_path(parsed)
    if path is not None:
        check_socket(path)
    return parsed


def socket_path(address: str) -> str | None:
    """The filesystem path of a unix address, else None."""
    parsed = parse_address(address)
    return parsed[len("unix:") :] if parsed.startswith("unix:") else None
