"""Which Docker daemon belongs to a job's user (no Docker import here: the hooks use it)."""

from __future__ import annotations

import os
from collections.abc import Mapping

TYPE_CHECKING = False  # a lean-path module: CONTRIBUTING.md, "Lean imports"
if TYPE_CHECKING:
    from acbslurm.config import Settings


def env_docker_host(env: Mapping[str, str]) -> str | None:
    """DOCKER_HOST, else $XDG_RUNTIME_DIR/docker.sock when it exists: the daemon the
    environment names, known before any setting is read (None: the settings decide)."""
    if env.get("DOCKER_HOST"):
        return env["DOCKER_HOST"]
    xdg = env.get("XDG_RUNTIME_DIR")
    if xdg and os.path.exists(os.path.join(xdg, "docker.sock")):
        return f"unix://{os.path.join(xdg, 'docker.sock')}"
    return None


def user_docker_host(settings: Settings, uid: int, user: str) -> str:
    """The site's per-user daemon address with ``{uid}``/``{user}`` filled in."""
    return settings.docker_host.format(uid=uid, user=user)


def find_docker_host(env: Mapping[str, str], settings: Settings, uid: int, user: str) -> str:
    """DOCKER_HOST, else $XDG_RUNTIME_DIR/docker.sock when it exists, else the site setting."""
    return env_docker_host(env) or user_docker_host(settings, uid, user)
