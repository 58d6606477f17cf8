"""Which Docker daemon belongs to a job's user (no Docker import here: the hooks use it)."""

from __future__ import annotations

import os
from collections.abc import Mapping

from acbslurm.config import Settings


def user_docker_host(settings: Settings, uid: int, user: str) -> str:
    """The site's per-user daemon address with ``{uid}``/``{user}`` filled in."""
    return settings.docker_host.format(uid=uid, user=user)


def find_docker_host(env: Mapping[str, str], settings: Settings, uid: int, user: str) -> str:
    """DOCKER_HOST, else $XDG_RUNTIME_DIR/docker.sock when it exists, else the site setting."""
    if env.get("DOCKER_HOST"):
        return env["DOCKER_HOST"]
    xdg = env.get("XDG_RUNTIME_DIR")
    if xdg and os.path.exists(os.path.join(xdg, "docker.sock")):
        return f"unix://{os.path.join(xdg, 'docker.sock')}"
    return user_docker_host(settings, uid, user)
