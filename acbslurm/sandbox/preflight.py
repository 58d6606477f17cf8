"""What the sandbox needs before it starts anything: root and the Debian packages."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from acbslurm.errors import SetupError
from acbslurm.slurm.versions import SlurmInstall

SETUP_HINT = "run `make setup` (or `bash scripts/setup.sh`) as root"

# Debian's Slurm: program -> package (a Slurm built from source brings its own).
DEBIAN_SLURM = {"slurmdbd": "slurmdbd", "slurmctld": "slurmctld", "slurmd": "slurmd"}
DEBIAN_SLURM_CLIENTS = {"sacctmgr": "slurm-client"}

# path or command -> Debian package that provides it
REQUIRED = {
    "/usr/sbin/munged": "munge",
    "/usr/sbin/mariadbd": "mariadb-server",
    "mariadb-install-db": "mariadb-server",
    "mariadb": "mariadb-client",
    "/usr/sbin/dockerd": "docker.io",
    "/usr/bin/docker": "docker.io",
    "/usr/share/docker.io/contrib/dockerd-rootless.sh": "docker.io",
    "rootlesskit": "rootlesskit",
    "slirp4netns": "slirp4netns",
    "newuidmap": "uidmap",
    "/bin/busybox": "busybox-static",
}


def missing_packages(install: SlurmInstall | None = None) -> list[str]:
    install = install or SlurmInstall()
    required = dict(REQUIRED)
    if install.is_debian:
        required.update({install.daemon(d): pkg for d, pkg in DEBIAN_SLURM.items()})
        required.update({install.client(c): pkg for c, pkg in DEBIAN_SLURM_CLIENTS.items()})
    missing: list[str] = []
    for what, pkg in required.items():
        found = Path(what).exists() if what.startswith("/") else shutil.which(what)
        if not found and pkg not in missing:
            missing.append(pkg)
    return missing


def missing_slurm_programs(install: SlurmInstall) -> list[str]:
    """A Slurm built from source: the programs its prefix lacks."""
    if install.is_debian:
        return []
    wanted = [install.daemon(d) for d in DEBIAN_SLURM] + [install.client("sacctmgr")]
    return [p for p in wanted if not Path(p).exists()]


def check(install: SlurmInstall | None = None) -> None:
    if os.geteuid() != 0:
        raise SetupError(
            "the sandbox needs root (it starts Slurm, MariaDB and Docker daemons); "
            "run it as root, e.g. `sudo .venv/bin/acbslurm sandbox up`"
        )
    install = install or SlurmInstall()
    lacking = missing_slurm_programs(install)
    if lacking:
        raise SetupError(
            f"Slurm {install.release} at {install.prefix} is incomplete: no {', '.join(lacking)}"
        )
    missing = missing_packages(install)
    if missing:
        raise SetupError(
            f"the sandbox needs Debian packages that are missing: {', '.join(missing)}; "
            f"{SETUP_HINT}"
        )
