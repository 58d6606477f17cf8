"""The generated protobuf/gRPC modules, typed as ``Any``.

They are imported by name so that mypy (strict) does not follow into the generated,
untyped code; regenerate them with scripts/gen_proto.sh.
"""

from __future__ import annotations

import importlib
from typing import Any

from acbslurm.broker.core import Device

pb: Any = importlib.import_module("acbslurm.broker._generated.broker_pb2")
pb_grpc: Any = importlib.import_module("acbslurm.broker._generated.broker_pb2_grpc")


# The wire's int32 has no "unknown": -1 stands for None there, and only there.
def device_msg(d: Device) -> Any:
    return pb.Device(
        id=d.id,
        name=d.name,
        memory_total=d.memory_total,
        minor=-1 if d.minor is None else d.minor,
        index=-1 if d.index is None else d.index,
        node=d.node,
    )


def device_of(msg: Any) -> Device:
    """The ``Device`` a ``device_msg`` carries."""
    return Device(
        msg.id,
        msg.name,
        msg.memory_total,
        None if msg.minor < 0 else msg.minor,
        None if msg.index < 0 else msg.index,
        msg.node,
    )
