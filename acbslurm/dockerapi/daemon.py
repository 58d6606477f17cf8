"""Reach the job user's rootless Docker daemon, with a clear message when it is not running."""

from __future__ import annotations

import os


def start_hint(docker_host: str) -> str:
    return (
        f"no Docker daemon is running at {docker_host} for uid {os.getuid()}; start your "
        "rootless daemon with `dockerd-rootless.sh` (or `systemctl --user start docker`), "
        "or point DOCKER_HOST at it"
    )
