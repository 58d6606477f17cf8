"""What the sandbox needs before it starts anything: root and the Debian packages."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from acbslurm.errors import SetupError

SETUP_HINT = "run `make setup` (or `bash scripts/setup.sh`) as root"

# path or command -> Debian package that provides it
REQUIRED = {
    "/usr/sbin/munged": "munge",
    "/usr/sbin/mariadbd": "mariadb-server",
    "mariadb-install-db": "mariadb-server",
    "mariadb": "mariadb-client",
    "/usr/sbin/slurmdbd": "slurmdbd",
    "/usr/sbin/slurmctld": "slurmctld",
    "/usr/sbin/slurmd": "slurmd",
    "sacctmgr": "slurm-client",
    "/usr/sbin/dockerd": "docker.io",
    "/usr/bin/docker": "docker.io",
    "/usr/share/docker.io/contrib/dockerd-rootless.sh": "docker.io",
    "rootlesskit": "rootlesskit",
    "slirp4netns": "slirp4netns",
    "newuidmap": "uidmap",
    "/bin/busybox": "busybox-static",
}


def missing_packages() -> list[str]:
    missing: list[str] = []
    for what, pkg in REQUIRED.items():
        found = Path(what).exists() if what.startswith("/") else shutil.which(what)
        if not found and pkg not in missing:
            missing.append(pkg)
    return missing


def check() -> None:
    if os.geteuid() != 0:
        raise SetupError(
            "the sandbox needs root (it starts Slurm, MariaDB and Docker daemons); "
            "run it as root, e.g. `sudo .venv/bin/acbslurm sandbox up`"
        )
    missing = missing_packages()
    if missing:
        raise SetupError(
            f"the sandbox needs Debian packages that are missing: {', '.join(missing)}; "
            f"{SETUP_HINT}"
        )
