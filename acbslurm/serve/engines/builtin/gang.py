"""A model's gang as its worker sees it: whose weights sit on which of the lease's
devices, and moving them all in and out together.

A model served by one process (``procs: 1``) is a group of one. With ``procs: N`` the
lease's devices are split in order into N equal parts, rank r's stage on part r; the
leader (this process) moves its own weights and has the followers move theirs
(``group.Leader``), returning only when all have.

Several nodes: when the broker lends a multi-node job's GPUs (its devices carry their
node), a group of one asks for all its devices on one node, and a group of N asks
for ``devices / N`` on each of the N nodes its ranks run on (``placement``), so that
every rank computes on GPUs of its own node; the lease's devices are then put in rank
order by node (``order``).

Bytes per device: on the CPU stand-ins a rank's weights count as split evenly over
its part (a simulated sharded model). On CUDA a rank's whole stage sits on the first
GPU of its part (no tensor parallelism), so that GPU needs all of it.
"""

from __future__ import annotations

from typing import Any

from acbslurm.serve.placement import node_plan, placeable


class Gang:
    def __init__(self, residency: Any, devices: int, procs: int, kind: str) -> None:
        self.residency = residency
        self.devices = devices
        self.procs = procs
        self.kind = kind  # cpu | cuda
        self.leader: Any = None  # group.Leader, once the followers have joined
        self.peer_weights: list[int] = []  # the followers' weight bytes, rank 1..N-1
        self.shares: list[int] = []  # bytes per device of each rank's part
        self.share = 0  # the largest: what the memory hint and the fit check use
        self.per_node = 0  # the broker request's per_node (0: the devices are on one node)
        self.rank_nodes: tuple[str, ...] = ()  # the node of each rank, when they differ
        self.set_peers([])

    def plan(self, device_nodes: list[str], placement_nodes: tuple[str, ...]) -> None:
        """Set ``per_node`` and ``rank_nodes`` (``node_plan``)."""
        self.per_node, self.rank_nodes = node_plan(
            self.devices, self.procs, device_nodes, placement_nodes
        )

    def placeable(self, devices: list[Any], need: int) -> bool:
        return placeable(self.devices, self.per_node, self.rank_nodes, devices, need)

    def pin(self, devices: list[Any]) -> list[str] | None:
        """The broker devices a first request may take: those on the ranks' nodes."""
        if not self.rank_nodes:
            return None
        return [d.id for d in devices if d.node in self.rank_nodes]

    def order(self, devices: list[Any]) -> list[str]:
        """A lease's device ids in rank order: rank r's part on ``rank_nodes[r]``."""
        if not self.rank_nodes:
            return [d.id for d in devices]
        return [d.id for node in self.rank_nodes for d in devices if d.node == node]

    def set_peers(self, weights: list[int], leader: Any = None) -> None:
        self.peer_weights = weights
        self.leader = leader
        per = self.devices // self.procs
        mine = [int(self.residency.weights), *weights]
        self.shares = mine if self.kind == "cuda" else [-(-w // per) for w in mine]
        self.share = max(self.shares)

    @property
    def weights(self) -> int:
        return int(self.residency.weights) + sum(self.peer_weights)

    @property
    def resident(self) -> bool:
        """The group's weights move together: the leader's state is everyone's."""
        return bool(self.residency.resident)

    def parts(self, device_ids: list[str]) -> list[list[str]]:
        """The lease's devices, split between the ranks (in order)."""
        per = len(device_ids) // self.procs
        return [device_ids[i * per : (i + 1) * per] for i in range(self.procs)]

    def resident_map(self, device_ids: list[str]) -> dict[str, int]:
        """What stays on each device of the lease after release."""
        out: dict[str, int] = {}
        for part, share in zip(self.parts(device_ids), self.shares, strict=True):
            if self.kind == "cuda":
                out[part[0]] = share
            else:
                out.update(dict.fromkeys(part, share))
        return out

    def ordinal(self, device_ids: list[str]) -> int:
        """The CUDA ordinal of the first GPU of ``device_ids`` (by UUID, as agarun does)."""
        if self.kind != "cuda":
            return 0
        # imports torch: not at the worker's start (Worker.register comes first)
        from acbslurm.broker.runtime import _cuda_ordinal

        return _cuda_ordinal(device_ids[0])

    def bring_in(self, device_ids: list[str]) -> float:
        """Weights back on the lease's devices, every rank's at once (caller holds
        ``residency.lock``); seconds it took (the slowest rank's)."""
        r = self.residency
        parts = self.parts(device_ids)
        if self.leader is None or r.resident:
            return float(r.ensure_on_device(self.ordinal(parts[0])))
        got = self.leader.restore(
            parts, own=lambda: (r.ensure_on_device(self.ordinal(parts[0])), r.resident_bytes)
        )
        return max(float(seconds) for seconds, _ in got)

    def evict(self) -> None:
        """Every rank's weights to host memory (takes ``residency.lock``, so never
        while a turn computes). Raises ``group.GroupBroken`` if a follower fails."""
        r = self.residency
        if self.leader is None:
            r.evict()
            return
        with r.lock:
            if r.resident:
                self.leader.evict(own=lambda: (r.evict_locked(), r.host_bytes))
