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

Which devices a gang can take (``node_plan``, ``placeable``, ``large_enough``) is
decided here too, for every engine and for the pool's fit check.

The gateway (``supervisor``) starts the leader, reads the store's address from it, then
starts the followers with the argument lists made here. Nothing here runs a process.
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Any

from acbslurm.errors import AcbslurmError
from acbslurm.serve.engines import engine_kind
from acbslurm.slurm.hostlist import expand_hostlist
from acbslurm.slurm.steps import overlap_step_argv
from acbslurm.values import frozen

LOCAL_HOST = "127.0.0.1"


@frozen
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
        self,
        rank: int,
        spec_json: str,
        rendezvous: str,
        device: str,
        python: str = "",
        engine: str = "builtin",
    ) -> list[str]:
        cmd = [
            python or sys.executable,
            "-m",
            engine_kind(engine).follower,
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
    # Slurm's client, for a pool on several nodes only: the gateway imports this module
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


def node_plan(
    count: int, procs: int, device_nodes: list[str], placement_nodes: tuple[str, ...]
) -> tuple[int, tuple[str, ...]]:
    """The broker request's ``per_node`` and the node of each rank, for a gang of
    ``count`` devices in ``procs`` processes on a broker whose devices are on
    ``device_nodes``, its ranks placed on ``placement_nodes`` (this node first).

    (0, ()) when the broker's devices are on one node: no constraint."""
    if len(set(device_nodes)) < 2:
        return 0, ()
    if procs == 1:
        return count, ()
    if not placement_nodes:
        return 0, ()
    ranks = tuple(placement_nodes[r % len(placement_nodes)] for r in range(procs))
    if len(set(ranks)) < procs:  # ranks share a node (pool jobs refuse procs > nodes)
        return 0, ()
    return count // procs, ranks


def large_enough(devices: list[Any], need: int) -> list[Any]:
    """The ``devices`` that can hold ``need`` bytes; a ``memory_total`` of 0 is a size
    the broker does not know (a job's GPUs without an inventory): taken to fit."""
    return [d for d in devices if d.memory_total == 0 or d.memory_total >= need]


def placeable(
    count: int, per_node: int, rank_nodes: tuple[str, ...], devices: list[Any], need: int
) -> bool:
    """Whether ``devices`` (with ``memory_total`` and ``node``) can ever hold the gang
    with ``need`` bytes on each device."""
    fitting = large_enough(devices, need)
    if not per_node:
        return len(fitting) >= count
    per: dict[str, int] = {}
    for d in fitting:
        per[d.node] = per.get(d.node, 0) + 1
    if rank_nodes:
        return all(per.get(n, 0) >= per_node for n in rank_nodes)
    return sum(1 for c in per.values() if c >= per_node) >= count // per_node
