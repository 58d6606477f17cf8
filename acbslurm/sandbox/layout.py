"""Where everything of one sandbox lives, and its saved parameters."""

from __future__ import annotations

import json
import os
import re
import socket
from pathlib import Path
from typing import ClassVar

from acbslurm.sandbox.dockerversions import HOST_VERSION, DockerInstall
from acbslurm.slurm.versions import DEBIAN_PREFIX, DEBIAN_RELEASE, SlurmInstall
from acbslurm.values import as_dict, field_names, frozen

DEFAULT_DIR = "/var/lib/acbslurm/sandbox"
DEFAULT_PORT_BASE = 16817
CLUSTER = "acbsandbox"
# sun_path holds 108 bytes with the NUL: a longer socket path cannot be bound at all.
# sun_path holds 108 bytes with its NUL; Docker 28.5's rootless containerd did not start
# ("timeout waiting for containerd to start") with its ttrpc socket at 107 bytes, so the
# check leaves a margin.
MAX_SOCKET_PATH = 104
USER = "user1"
# A second user with no Docker daemon: tests check that it reaches none of user1's jobs,
# records, sockets or report rows.
USER2 = "user2"
IMAGE = "acbslurm/busybox:latest"
# `up --nodes`: each node one slurmd and one port (see Params.node_port).
MAX_NODES = 16
MAX_GPUS = 64  # per node
_GPU_TYPE = re.compile(r"^[A-Za-z0-9_.\-]+$")


def parse_gpu_types(text: str) -> list[tuple[str, int]]:
    """``h200:1,a100:2`` -> [("h200", 1), ("a100", 2)]: each node's GPUs by type, in
    device-file order; ValueError naming the bad item."""
    out: list[tuple[str, int]] = []
    for item in text.split(","):
        name, _, count = item.strip().rpartition(":")
        if not (_GPU_TYPE.match(name) and count.isascii() and count.isdigit() and int(count)):
            raise ValueError(f"{item.strip()!r} is not TYPE:COUNT (e.g. h200:1,a100:1)")
        if any(name == n for n, _ in out):
            raise ValueError(f"type {name!r} is named twice")
        out.append((name, int(count)))
    total = sum(c for _, c in out)
    if total > MAX_GPUS:
        raise ValueError(f"{total} GPUs per node; at most {MAX_GPUS}")
    return out


def default_dir() -> Path:
    return Path(os.environ.get("ACBSLURM_SANDBOX_DIR") or DEFAULT_DIR)


def default_port_base() -> int:
    """``ACBSLURM_SANDBOX_PORT_BASE`` or 16817 (two sandboxes on one machine need two)."""
    raw = os.environ.get("ACBSLURM_SANDBOX_PORT_BASE", "").strip()
    return int(raw) if raw.isdigit() and raw.isascii() else DEFAULT_PORT_BASE


@frozen
class Params:
    """What ``up`` was asked for; saved so that later commands and a second ``up`` agree."""

    gpus: int = 2  # per node
    # Slurm GRES types of each node's GPUs (``h200:1,a100:1``, in device-file order);
    # "" for untyped GPUs.
    gpu_types: str = ""
    # slurmd daemons on this machine, each a node with its own GPUs (``slurmd -N``).
    nodes: int = 1
    # Each node in a network namespace of its own, with its own address and Docker
    # daemon (`up --node-network`, nodenet.py); else all share this machine's network.
    node_network: bool = False
    port_base: int = DEFAULT_PORT_BASE
    cpus: int = 8
    memory_mb: int = 16000
    node: str = ""
    cluster: str = CLUSTER
    user: str = USER
    user2: str = USER2
    # The interpreter and checkout whose acbslurm the Slurm hooks run.
    python: str = ""
    pythonpath: str = ""
    # The Debian package's hooks (/usr/libexec/acbslurm) when the sandbox runs the
    # installed package (ACBSLURM_INSTALLED=1: cluster.acbslurm_source); "": the checkout's.
    hooks_dir: str = ""
    # The Slurm installation the daemons and clients come from (Debian's by default).
    slurm_prefix: str = DEBIAN_PREFIX
    slurm_release: str = DEBIAN_RELEASE
    # The Docker the user's rootless daemon runs (the host's 20.10 by default; `up
    # --docker 28.5`: a prefix in /var/cache/acbslurm/docker).
    docker_version: str = HOST_VERSION
    docker_prefix: str = ""

    def gpu_type(self, index: int) -> str:
        """The GRES type of each node's GPU ``index`` ("" when untyped)."""
        types = [n for n, c in parse_gpu_types(self.gpu_types) for _ in range(c)]
        return types[index] if self.gpu_types else ""

    @property
    def gres(self) -> str:
        """slurm.conf's ``Gres=`` of each node: ``gpu:2`` or ``gpu:h200:1,gpu:a100:1``."""
        if not self.gpu_types:
            return f"gpu:{self.gpus}"
        return ",".join(f"gpu:{n}:{c}" for n, c in parse_gpu_types(self.gpu_types))

    # s: p1's GraceTime, the time a preempted job has to checkpoint (above the run's
    # stop_grace of 5 s, so that the difference shows).
    preempt_grace: ClassVar[int] = 15

    @property
    def first_job_id(self) -> int:
        """slurm.conf's FirstJobId: apart for each port base. Sandboxes on one machine share
        its cgroup tree (``slurm_<host>/uid_N/job_ID``: the host's name is the node name of
        each), so two jobs of one id in two sandboxes would share a job cgroup, and the end
        of one would kill the other's processes. Bases 100 apart leave 100,000 ids each."""
        return 1 + max(0, self.port_base - 10000) * 1000

    @property
    def slurm(self) -> SlurmInstall:
        return SlurmInstall(prefix=self.slurm_prefix, release=self.slurm_release)

    @property
    def docker(self) -> DockerInstall:
        return DockerInstall(version=self.docker_version, prefix=self.docker_prefix)

    @property
    def slurmctld_port(self) -> int:
        return self.port_base

    @property
    def slurmd_port(self) -> int:
        return self.port_base + 1

    @property
    def node_names(self) -> list[str]:
        """Slurm's node names: the host's short name alone, or ``<host>-1`` ... ``-N``."""
        if self.nodes == 1:
            return [self.node]
        return [f"{self.node}-{i}" for i in range(1, self.nodes + 1)]

    def node_port(self, name: str) -> int:
        """The slurmd port of node ``name``: the first node's is ``port_base + 1``, the
        others' follow MariaDB's (``+ 4`` on), so that every port of a sandbox stays
        below ``port_base + 4 + MAX_NODES``: bases 100 apart never collide."""
        i = self.node_names.index(name)
        return self.slurmd_port if i == 0 else self.port_base + 3 + i

    @property
    def slurmdbd_port(self) -> int:
        return self.port_base + 2

    @property
    def mariadb_port(self) -> int:
        return self.port_base + 3


class Layout:
    """Paths under the sandbox directory (all config and state live there)."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve() if root.exists() else root.absolute()
        self.etc = self.root / "etc"
        self.run = self.root / "run"
        self.log = self.root / "log"
        self.state = self.root / "state"
        self.dev = self.root / "dev"
        self.bin = self.root / "bin"
        # acbslurm's OCI runtime, given to the user's daemon (--add-runtime).
        self.oci_runtime = self.bin / "acbslurm-runc"
        self.libexec = self.root / "libexec"
        self.params_file = self.root / "sandbox.json"
        self.slurm_conf = self.etc / "slurm.conf"
        self.gres_conf = self.etc / "gres.conf"
        # Beside slurm.conf, where slurmd (and each node's slurm-<node>.conf) finds it.
        self.cgroup_conf = self.etc / "cgroup.conf"
        self.slurmdbd_conf = self.etc / "slurmdbd.conf"
        self.inventory = self.etc / "gpus.json"
        # With several nodes each has its own inventory; the hooks' settings name
        # ``gpus-{node}.json`` and expand ``{node}`` (config.py).
        self.node_inventory_pattern = self.etc / "gpus-{node}.json"
        self.acbslurm_conf = self.etc / "acbslurm.yaml"
        self.report_db_cnf = self.etc / "report-db.cnf"
        self.secrets = self.etc / "secrets.json"
        self.munge_key = self.etc / "munge" / "munge.key"
        self.munge_socket = self.run / "munge" / "munge.socket.2"
        self.mysql_data = self.state / "mysql"
        self.mysql_socket = self.run / "mysqld" / "mysqld.sock"
        self.records = self.state / "jobs"
        self.hook_record = self.state / "gpu-hook.jsonl"
        self.hook_record_dir = self.state / "gpu-hook"
        # CDI (Docker 26.1 on): the spec of the emulated GPUs, in the directory the
        # rootless daemon's own daemon.json names as its cdi-spec-dirs.
        self.cdi_dir = self.etc / "cdi"
        self.cdi_spec = self.cdi_dir / "nvidia.yaml"

    def node_inventory(self, params: Params, node: str) -> Path:
        """The GPU inventory of ``node`` (the single node keeps ``gpus.json``)."""
        if params.nodes == 1:
            return self.inventory
        return Path(str(self.node_inventory_pattern).replace("{node}", node))

    def node_munge_socket(self, params: Params, node: str) -> Path:
        """The munged socket of ``node``'s slurmd: the sandbox's own for the first node,
        a munged of its own (``munged-<node>``) for each other. On one munged, the
        second slurmd to check a job's launch credential finds it "replayed" (munged
        decodes a credential once), which slurmd accepts only when Slurm was built with
        --enable-multiple-slurmd (cred_munge.c of 23.02 and 25.11; 2-node steps failed
        on 25.11.7, Debian's 22.05.8 ran them): one munged per node, as each host of a
        real cluster has."""
        if node == params.node_names[0]:
            return self.munge_socket
        return self.run / f"munge-{node}" / "munge.socket.2"

    def node_slurm_conf(self, params: Params, node: str) -> Path:
        """The slurm.conf ``node``'s slurmd reads: slurm.conf with its own munged socket
        (the first node's is slurm.conf itself)."""
        if node == params.node_names[0]:
            return self.slurm_conf
        return self.etc / f"slurm-{node}.conf"

    def munged_component(self, params: Params, node: str) -> str:
        return "munged" if node == params.node_names[0] else f"munged-{node}"

    def slurmd_component(self, params: Params, node: str) -> str:
        """``slurmd``, or ``slurmd-<node>`` with several nodes (its pid file and log)."""
        return "slurmd" if params.nodes == 1 else f"slurmd-{node}"

    def user_runtime_dir(self, user: str, node: str | None = None) -> Path:
        """``user``'s runtime directory (its daemon's socket and state): the sandbox's,
        or, with node networks, ``node``'s, which the node's slurmd sees at the former."""
        return self.run / (user if node is None else f"{user}@{node}")

    def docker_socket(self, user: str, node: str | None = None) -> Path:
        return self.user_runtime_dir(user, node) / "docker.sock"

    def longest_socket(self, user: str, node: str | None = None) -> Path:
        """The longest unix socket path the sandbox makes: rootless containerd's ttrpc
        socket under the user's runtime directory (``node``'s, with node networks)."""
        return self.user_runtime_dir(user, node) / "docker" / "containerd" / "containerd.sock.ttrpc"

    def docker_config(self, user: str) -> Path:
        """The daemon.json of ``user``'s daemon (``--config-file``): the sandbox's own,
        not ~/.config/docker/daemon.json, which other sandboxes of the same user share."""
        return self.etc / "docker" / f"daemon-{user}.json"

    def docker_data(self, user: str, node: str | None = None) -> Path:
        return self.state / "docker" / (user if node is None else f"{user}@{node}")

    def log_file(self, name: str) -> Path:
        return self.log / f"{name}.log"

    def load_params(self) -> Params | None:
        try:
            data = json.loads(self.params_file.read_text())
        except (OSError, ValueError):
            return None
        known = {k: v for k, v in data.items() if k in field_names(Params)}
        return Params(**known)

    def save_params(self, params: Params) -> None:
        self.params_file.write_text(json.dumps(as_dict(params), indent=2) + "\n")


def node_name() -> str:
    return socket.gethostname().split(".")[0]
