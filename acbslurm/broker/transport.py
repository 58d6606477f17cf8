"""How a client's requests reach the broker and their answers come back.

``BrokerClient`` keeps the session and its leases and hands the wire to one of two
transports of this shape: the gRPC stream itself (``stream.Stream``: the reader thread
reads the answers and wakes the callers) or, on the broker's host, the session's local
lane (``lane_client.Lane``: the caller that waits for an answer reads the datagrams
itself, which is what makes it fast).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Protocol


class Transport(Protocol):
    """Requests, releases, cancels and eviction answers out; grants and rejections in.

    The answers go to the client through the callback the transport was made with;
    ``wait`` returns once that has set ``done``, at ``deadline`` (``time.monotonic``;
    None = no limit) or when the transport has ended (the caller looks for the next
    session then).
    """

    @property
    def on_lane(self) -> bool: ...

    @property
    def closed(self) -> bool: ...

    def send(self, msg: Any) -> None: ...

    def wait(self, done: threading.Event, deadline: float | None) -> None: ...

    def close(self) -> None: ...


def remaining(deadline: float | None) -> float | None:
    """Seconds left until ``deadline`` (0 at the earliest); None for no deadline."""
    return None if deadline is None else max(0.0, deadline - time.monotonic())
