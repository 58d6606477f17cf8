"""Every difference between the Slurm releases acbslurm runs on, in one place.

Each entry names the release that needed it (read from that release's sources and
checked on its running daemons in the sandbox). Nothing else in acbslurm compares Slurm
versions or spells a Slurm install path: the sandbox renders its slurm.conf from
``ConfigChoices``, starts the daemons of a ``SlurmInstall``, and the report labels
slurmdbd's schema numbers with ``SCHEMA_RELEASES``.

Supported: Debian 12's packaged 22.05.8 (the default) and the releases built from
source: 23.02, 23.11, 24.11, 25.05, 25.11 and 26.05.
"""

from __future__ import annotations

import os
import re

from acbslurm.errors import ConfigError
from acbslurm.values import frozen

# Debian's packages put the daemons in /usr/sbin and the clients in /usr/bin.
DEBIAN_PREFIX = "/usr"
DEBIAN_RELEASE = "22.05.8"
# The releases the sandbox, the tests and `make matrix` cover (the Debian package first).
SUPPORTED = ("22.05.8", "23.02.8", "23.11.11", "24.11.7", "25.05.8", "25.11.7", "26.05.3")

DAEMONS = ("slurmctld", "slurmd", "slurmdbd", "slurmstepd")
CLIENTS = ("sbatch", "scontrol", "squeue", "sacct", "sacctmgr", "scancel", "sinfo", "srun")

_RELEASE_RE = re.compile(r"^([0-9]{2})\.([0-9]{2})(?:\.([0-9]+))?$")


class ReleaseError(ConfigError, ValueError):
    """Not a Slurm release (``25.11.7``). A ValueError too, as callers caught before."""


def parse_release(text: str) -> tuple[int, int, int]:
    """``25.11.7`` -> (25, 11, 7); ``slurm 22.05.8`` (``slurmctld -V``) works too."""
    word = text.strip().split()[-1] if text.strip() else ""
    m = _RELEASE_RE.match(word)
    if not m:
        raise ReleaseError(f"not a Slurm release: {text!r} (expected e.g. 25.11.7)")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def major(text: str) -> str:
    """``25.11.7`` -> ``25.11``."""
    y, m, _ = parse_release(text)
    return f"{y:02d}.{m:02d}"


@frozen
class SlurmInstall:
    """Where one Slurm installation keeps its programs (``prefix`` of ./configure)."""

    prefix: str = DEBIAN_PREFIX
    release: str = DEBIAN_RELEASE

    @property
    def bin_dir(self) -> str:
        return os.path.join(self.prefix, "bin")

    @property
    def sbin_dir(self) -> str:
        return os.path.join(self.prefix, "sbin")

    @property
    def include_dir(self) -> str:
        return os.path.join(self.prefix, "include")

    @property
    def lib_dir(self) -> str:
        return os.path.join(self.prefix, "lib")

    @property
    def is_debian(self) -> bool:
        return self.prefix == DEBIAN_PREFIX

    def daemon(self, name: str) -> str:
        return os.path.join(self.sbin_dir, name)

    def client(self, name: str) -> str:
        return os.path.join(self.bin_dir, name)

    def path_env(self, rest: str = "/usr/sbin:/usr/bin:/sbin:/bin") -> str:
        """A PATH with this install's clients first (Debian's 22.05 clients cannot talk
        to newer daemons: "Incompatible versions of client and server code")."""
        if self.is_debian:
            return rest
        return f"{self.bin_dir}:{self.sbin_dir}:{rest}"


@frozen
class ConfigChoices:
    """The slurm.conf lines and database settings that differ between releases."""

    # 23.02 renamed the credential plugin: CryptoType=crypto/munge -> CredType=cred/munge
    # (23.02 to 26.05 still read CryptoType as an alias; 22.05 knows only CryptoType).
    cred_line: str
    # A GPU site's node: the task plugins confine each step to its cores (task/cgroup's
    # cpuset, task/affinity's binding), its memory and its GPUs (the devices cgroup).
    # task/cgroup and task/affinity exist in every release from 22.05 to 26.05.
    task_plugin_line: str
    # From 23.02, gres/gpu accounting also records gres/gpumem and gres/gpuutil
    # (from NVML samples; the sandbox's emulated GPUs give none).
    accounting_tres: str
    # PrologFlags=Alloc: the prolog runs at allocation with SLURM_JOB_GPUS (every release).
    prolog_flags: str
    # proctrack/cgroup (every release): a step's processes are those of its cgroup
    # (freezer on cgroup v1), so that nothing a job started outlives it.
    proctrack: str
    # jobacct_gather/cgroup (every release): sstat/sacct usage read from the step's
    # cgroups (memory, cpuacct) rather than by walking /proc.
    jobacct_gather: str
    # cgroup.conf, beside slurm.conf (slurmd and slurmstepd read it from there).
    # CgroupPlugin=autodetect (every release; 23.02 on default to it): cgroup/v1 where
    # /sys/fs/cgroup is a tmpfs of v1 hierarchies (this machine), cgroup/v2 on a
    # unified one. CgroupAutomount is left out: the controllers are mounted, and 23.11
    # on log it as defunct (src/interfaces/cgroup.c).
    cgroup_conf: tuple[str, ...]
    # slurmdbd's _check_database_variables: it logs "Database settings not recommended
    # values" below half of these. innodb_buffer_pool_size went from 1 GiB (22.05,
    # 23.02) to 4 GiB (23.11 on); 2 GiB (half) silences it without taking 4.
    mariadb_settings: tuple[tuple[str, str], ...]


def config_choices(release: str) -> ConfigChoices:
    v = parse_release(release)[:2]
    pool = "1G" if v < (23, 11) else "2G"
    return ConfigChoices(
        cred_line="CryptoType=crypto/munge" if v < (23, 2) else "CredType=cred/munge",
        task_plugin_line="TaskPlugin=task/cgroup,task/affinity",
        accounting_tres="gres/gpu" if v < (23, 2) else "gres/gpu,gres/gpumem,gres/gpuutil",
        prolog_flags="Alloc",
        proctrack="proctrack/cgroup",
        jobacct_gather="jobacct_gather/cgroup",
        cgroup_conf=(
            "CgroupPlugin=autodetect",
            "ConstrainCores=yes",
            "ConstrainRAMSpace=yes",
            "ConstrainDevices=yes",
        ),
        mariadb_settings=(
            ("innodb-buffer-pool-size", pool),
            ("innodb-lock-wait-timeout", "900"),
            ("innodb-log-file-size", "256M"),
            ("max-allowed-packet", "64M"),
        ),
    )


# slurmdbd's convert_version_table.version -> the releases that write it (the NOTE
# lines above CONVERT_VERSION in src/plugins/accounting_storage/mysql/as_mysql_convert.c).
SCHEMA_RELEASES: dict[int, str] = {
    11: "22.05",  # first 22.05
    12: "22.05",  # 22.05.x later (Debian 12's 22.05.8)
    13: "23.02",
    14: "23.11",  # first 23.11 releases
    15: "23.11/24.05",  # later 23.11 and 24.05
    16: "24.11-26.05",
}
# The oldest schema each release's slurmdbd converts (MIN_CONVERT_VERSION): a 22.05
# database (12) reaches 25.11 through a 23.x slurmdbd.
MIN_CONVERT: dict[str, int] = {
    "23.02": 10,
    "23.11": 11,
    "24.11": 13,
    "25.05": 14,
    "25.11": 15,
    "26.05": 15,
}
# From this schema on, steps may carry gres/gpuutil and gres/gpumem (Slurm 23.02).
GPU_UTIL_MIN_SCHEMA = 13


def sacctmgr_shows_dbd_private_data(release: str) -> bool:
    """Whether ``sacctmgr show config`` (of ``release``) prints slurmdbd's own PrivateData
    in its "SlurmDBD configuration" section.

    Up to 25.11 slurmdbd sends its key/value pairs. From 26.05 it sends its settings and
    sacctmgr formats them itself (slurmdb_config_get_keypairs, src/api/
    extra_get_functions.c), filling PrivateData from the client's own slurm.conf: that
    line is then slurmctld's PrivateData, not what sacct obeys (seen on 26.05.3: the
    sandbox's slurmdbd.conf says jobs, the section said none).
    """
    return parse_release(release)[:2] < (26, 5)


# The pyslurm release that builds against each Slurm major (pyslurm follows Slurm's
# numbering from 23.x on). Only 25.11 is built and tested here (the CI's 25.11 leg).
PYSLURM_FOR: dict[str, str] = {"25.11": "25.11.2"}


def upgrade_path(source_schema: int, target: str) -> list[str]:
    """The releases a database of ``source_schema`` must pass through to reach ``target``
    (empty: ``target``'s slurmdbd converts it itself)."""
    need = MIN_CONVERT.get(major(target))
    if need is None or source_schema >= need:
        return []
    # 23.11 converts anything from 11 on and writes 15, which every later release reads.
    return ["23.11"]
