"""Connect to the job user's rootless Docker daemon with the Docker SDK."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from acbslurm.errors import DockerError, SetupError

if TYPE_CHECKING:
    import docker


def start_hint(docker_host: str) -> str:
    return (
        f"no Docker daemon is running at {docker_host} for user {os.getuid()}; start your "
        "rootless daemon with `dockerd-rootless.sh` (or `systemctl --user start docker`), "
        "or point DOCKER_HOST at it"
    )


def connect(docker_host: str, timeout: float = 60.0) -> docker.APIClient:
    """An API client for ``docker_host``, checked with a ping."""
    import docker
    import docker.errors

    sock = docker_host[len("unix://") :] if docker_host.startswith("unix://") else ""
    if sock and not os.path.exists(sock):
        raise SetupError(start_hint(docker_host))
    try:
        api = docker.APIClient(base_url=docker_host, timeout=int(timeout), version="auto")
    except docker.errors.DockerException as exc:
        msg = str(exc)
        if "Connection refused" in msg or "No such file" in msg:
            raise SetupError(start_hint(docker_host)) from None
        raise DockerError(f"Docker at {docker_host}: {msg}") from None
    return api
