"""Where a model's worker processes run: the leader here, the followers here or on
the job's other nodes.

- **Bare node** (or a one-node job): every rank is a local process; the leader's
  rendezvous (a ``torch.distributed`` TCP store on a free port) is on 127.0.0.1.
- **Multi-node Slurm job** (``SLURM_JOB_NUM_NODES`` > 1): rank r runs on the r-th
  node of the job counted from this one (``SLURMD_NODENAME``), started with ``srun
  --nodes 1 --ntasks 1 --nodelist NODE --overlap`` from the serve process; the
  followers reach the leader's store at this node's name, or at its ``NodeAddr`` in
  Slurm when the name does not resolve (``ACBSLURM_SERVE_RENDEZVOUS_HOST`` overrides
  both, for example an address on the fast network).

The gateway (``workers``) starts the leader, reads the store's address from it, then
starts the followers with the argument lists made here. Nothing here runs a process.
"""

from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass

from acbslurm.slurm.hostlist import expand_hostlist
from acbslurm.slurm.steps import overlap_step_argv

LOCAL_HOST = "127.0.0.1"


@dataclass(frozen=True)
class Placement:
    nodes: tuple[str, ...] = ()  # the job's nodes, this one first; empty: all local
    host: str = LOCAL_HOST  # where followers find the leader's rendezvous

    def node_of(self, rank: int) -> str | None:
        """The node rank ``rank`` runs on; None: here, as a plain local process."""
        if len(self.nodes) < 2 or rank == 0:
            return None
        node = self.nodes[rank % len(self.nodes)]
        return None if node == self.nodes[0] else node

    def follower_argv(
        self, rank: int, spec_json: str, rendezvous: str, device: str, python: str = ""
    ) -> list[str]:
        cmd = [
            python or sys.executable,
            "-m",
            "acbslurm.serve.follower",
            "--spec",
            spec_json,
            "--rank",
            str(rank),
            "--rendezvous",
            rendezvous,
            "--device",
            device,
        ]
        node = self.node_of(rank)
        if node is None:
            return cmd
        return overlap_step_argv(node, cmd)


def from_env(env: dict[str, str] | None = None) -> Placement:
    """Local unless inside a Slurm job of several nodes."""
    env = dict(os.environ if env is None else env)
    try:
        count = int(env.get("SLURM_JOB_NUM_NODES", "1") or 1)
    except ValueError:
        count = 1
    nodelist = env.get("SLURM_JOB_NODELIST", "")
    if count < 2 or not nodelist:
        return Placement()
    nodes = expand_hostlist(nodelist)
    here = env.get("SLURMD_NODENAME") or socket.gethostname()
    if here in nodes:  # this node first, then the others in the job's order
        i = nodes.index(here)
        nodes = nodes[i:] + nodes[:i]
    host = env.get("ACBSLURM_SERVE_RENDEZVOUS_HOST") or reachable(here)
    return Placement(tuple(nodes), host)


def reachable(node: str) -> str:
    """``node`` when its name resolves, else Slurm's ``NodeAddr`` for it (the name
    again when Slurm cannot say: the followers' error will then name it)."""
    from acbslurm.errors import AcbslurmError
    from acbslurm.slurm.jobgpus import node_address

    try:
        socket.getaddrinfo(node, None)
        return node
    except OSError:
        pass
    try:
        return node_address(node)
    except AcbslurmError:
        return node
