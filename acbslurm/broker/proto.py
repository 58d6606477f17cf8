"""The generated protobuf/gRPC modules, typed as ``Any``.

They are imported by name so that mypy (strict) does not follow into the generated,
untyped code; regenerate them with scripts/gen_proto.sh.
"""

from __future__ import annotations

import importlib
from typing import Any

pb: Any = importlib.import_module("acbslurm.broker._generated.broker_pb2")
pb_grpc: Any = importlib.import_module("acbslurm.broker._generated.broker_pb2_grpc")
