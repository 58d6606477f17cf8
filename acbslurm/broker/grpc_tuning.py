"""Process-wide gRPC settings that cut the broker's per-message cost.

gRPC 1.85's event-engine endpoints hand every read and write to a helper thread; the
older iomgr does the I/O on the thread that waits for the event. On the 2-core test
box that halves the context switches per grant (docs/broker.md has the numbers).
gRPC reads ``GRPC_EXPERIMENTS`` once, when ``grpc`` is first imported, so entry
points (``broker serve``, agarun's bootstrap, the benchmark) call this before that.
"""

from __future__ import annotations

import os
import sys

SERVER_EXPERIMENTS = "-event_engine_listener"
CLIENT_EXPERIMENTS = "-event_engine_client"


def inline_io(experiments: str) -> bool:
    """Set ``GRPC_EXPERIMENTS`` unless the user set it or grpc is already imported."""
    if "grpc" in sys.modules or "GRPC_EXPERIMENTS" in os.environ:
        return False
    os.environ["GRPC_EXPERIMENTS"] = experiments
    return True
