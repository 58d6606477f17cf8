"""The Docker releases a sandbox can run, and where one installation's programs are.

20.10 is the host's own Debian 12 packages (docker.io, containerd, runc, rootlesskit).
The newer ones are Debian's packages of a later suite, fetched once into a cache
(dockerbuild.py); this module only names them, so that layout.py can say which one a
sandbox runs without importing the fetching code.
"""

from __future__ import annotations

from pathlib import Path

from acbslurm.values import frozen

HOST_VERSION = "20.10"
HOST_ROOTLESS_SCRIPT = "/usr/share/docker.io/contrib/dockerd-rootless.sh"
HOST_CLI = "/usr/bin/docker"  # Debian's client, matching its daemon


@frozen
class Release:
    """A Docker release as Debian packages it: the suite and the exact versions."""

    suite: str
    packages: tuple[tuple[str, str], ...]
    # Programs linked against a newer glibc than bookworm's 2.36: given the suite's own
    # libc (in the prefix) as their ELF interpreter and run path.
    relink: tuple[str, ...] = ("usr/sbin/runc",)
    # Docker 26.1 has CDI behind `features: {"cdi": true}`; 28.2 on enables it.
    cdi_feature_flag: bool = False


# The suites' versions when they were tested (docs/compatibility.md, "Docker").
OFFERED: dict[str, Release] = {
    "26.1": Release(
        suite="trixie",
        packages=(
            ("docker.io", "26.1.5+dfsg1-9+deb13u1+b1"),
            ("docker-cli", "26.1.5+dfsg1-9+deb13u1+b1"),
            ("containerd", "1.7.24~ds1-6+deb13u1"),
            ("runc", "1.1.15+ds1-2+b4"),
            ("rootlesskit", "2.0.2-2+b9"),
            ("libc6", "2.41-12+deb13u5"),
            ("libseccomp2", "2.6.0-2"),
        ),
        cdi_feature_flag=True,
    ),
    "28.5": Release(
        suite="sid",
        packages=(
            ("docker.io", "28.5.2+dfsg4-5"),
            ("docker-cli", "28.5.2+dfsg4-5"),
            ("containerd", "2.1.9+ds1-5"),
            ("runc", "1.3.6+ds1-1"),
            ("rootlesskit", "2.0.2-2+b11"),
            ("libc6", "2.43-7"),
            ("libseccomp2", "2.6.1-1+b2"),
        ),
    ),
}


def offered() -> list[str]:
    return [HOST_VERSION, *OFFERED]


@frozen
class DockerInstall:
    """One Docker installation: the host's (``prefix`` empty) or a cached one."""

    version: str = HOST_VERSION
    prefix: str = ""

    @property
    def cli(self) -> str:
        return str(Path(self.prefix) / "usr/bin/docker") if self.prefix else HOST_CLI

    @property
    def rootless_script(self) -> str:
        if not self.prefix:
            return HOST_ROOTLESS_SCRIPT
        return str(Path(self.prefix) / "usr/share/docker.io/contrib/dockerd-rootless.sh")

    @property
    def path_dirs(self) -> list[str]:
        """Put before the system's on the daemon's PATH: dockerd-rootless.sh finds
        rootlesskit and dockerd there, dockerd its containerd, runc and docker-init."""
        if not self.prefix:
            return []
        return [str(Path(self.prefix) / "usr/bin"), str(Path(self.prefix) / "usr/sbin")]

    @property
    def docker_proxy(self) -> str:
        """The installation's own docker-proxy (not rootlesskit-docker-proxy)."""
        return str(Path(self.prefix or "/") / "usr/sbin/docker-proxy")

    @property
    def has_cdi(self) -> bool:
        return self.version in OFFERED

    @property
    def cdi_feature_flag(self) -> bool:
        rel = OFFERED.get(self.version)
        return bool(rel and rel.cdi_feature_flag)
