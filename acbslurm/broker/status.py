"""The broker's state as a plain dict: ``acbslurm broker status``, the tests and the
benchmarks read it (from the broker's ``Status`` call)."""

from __future__ import annotations

from typing import Any

import grpc

from acbslurm.broker.address import check_address
from acbslurm.broker.proto import pb, pb_grpc
from acbslurm.errors import BrokerError


def fetch_status(address: str, timeout: float = 5.0) -> dict[str, Any]:
    """The broker's state as a plain dict (also used by tests and benchmarks)."""
    check_address(address)  # another user's socket: "permission denied", not a time-out
    with grpc.insecure_channel(address) as channel:
        try:
            reply = pb_grpc.GpuBrokerStub(channel).Status(
                pb.StatusRequest(), timeout=timeout, wait_for_ready=True
            )
        except grpc.RpcError as exc:
            raise BrokerError(
                f"no GPU broker answers at {address} ({exc.code().name}); "
                "start one with `acbslurm broker serve`"
            ) from None
    return {
        "policy": reply.policy,
        "quantum_seconds": reply.quantum_seconds,
        "source": reply.source,
        "grants": reply.grants,
        "evictions": reply.evictions,
        "yields_asked": reply.yields_asked,
        "disconnects": reply.disconnects,
        "backfill": reply.backfill,
        "backfills": reply.backfills,
        "recovering": reply.recovering,
        "recovery_seconds_left": round(reply.recovery_seconds_left, 3),
        "sessions_expected": reply.sessions_expected,
        "devices": [
            {
                "id": d.device.id,
                "name": d.device.name,
                "memory_total": d.device.memory_total,
                "node": d.device.node or None,
                "holder": d.holder or None,
                "lease_id": d.lease_id or None,
                "held_seconds": round(d.held_seconds, 3),
                "residents": {str(r.client_id): r.bytes for r in d.residents},
            }
            for d in reply.devices
        ],
        "clients": [
            {
                "id": c.client_id,
                "name": c.name,
                "pid": c.pid,
                "waiting_count": c.waiting_count,
                "waiting_seconds": round(c.waiting_seconds, 3),
                "on_lane": c.on_lane,
                "rejoined": c.rejoined,
            }
            for c in reply.clients
        ],
    }
