"""The session's gRPC stream: connect and register, send, read, close.

Every session has one; it carries the registration and the broker's pushes (yield and
eviction requests), and its end is the end of the session. Without a local lane
(remote clients, ``lane=False``) it is also the transport of the requests and their
answers (``transport.Transport``): the client's reader thread runs ``pump``, which
hands each message to the client and then wakes the callers waiting in ``wait``.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

import grpc

from acbslurm.broker.proto import pb, pb_grpc
from acbslurm.broker.transport import remaining
from acbslurm.errors import BrokerError

_STOP = object()
# Notice a broker that comes back quickly (gRPC's default first backoff is 1 s).
_CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.min_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 500),
]


class Stream:
    """One registered ``Session`` call (a reconnect makes a new one)."""

    on_lane = False

    def __init__(
        self, address: str, channel: grpc.Channel, call: Any, out: queue.SimpleQueue[Any]
    ) -> None:
        self.address = address
        self._channel = channel
        self._call = call
        self._out = out
        self.registered: Any = None  # the broker's Registered answer
        # Notified after each message the reader handled, and when the stream ends.
        self._cond = threading.Condition(threading.Lock())
        self._ended = False
        self._closing = False

    @classmethod
    def open(cls, address: str, register: Any, timeout: float) -> Stream:
        """Connect and send ``register`` (a pb.Register); BrokerError when that fails."""
        channel = grpc.insecure_channel(address, options=_CHANNEL_OPTIONS)
        try:
            grpc.channel_ready_future(channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            channel.close()
            raise BrokerError(
                f"no GPU broker answers at {address} within {timeout:g}s "
                "(start one with `acbslurm broker serve`, or set ACBSLURM_BROKER_ADDRESS)"
            ) from None
        out: queue.SimpleQueue[Any] = queue.SimpleQueue()
        call = pb_grpc.GpuBrokerStub(channel).Session(iter(out.get, _STOP))
        stream = cls(address, channel, call, out)
        stream.send(pb.ClientMessage(register=register))
        try:
            stream.registered = next(call).registered
        except (grpc.RpcError, StopIteration) as exc:
            stream.close()
            raise BrokerError(f"broker at {address} refused the session: {exc}") from None
        return stream

    @property
    def closed(self) -> bool:
        return self._ended

    def send(self, msg: Any) -> None:
        self._out.put(msg)

    def wait(self, done: threading.Event, deadline: float | None) -> None:
        """Until the reader has set ``done``, ``deadline`` passed, or the stream ended."""
        with self._cond:
            while not done.is_set() and not self._ended:
                left = remaining(deadline)
                if left is not None and left <= 0:
                    return
                self._cond.wait(left)

    def pump(self, on_message: Callable[[Any], None]) -> str:
        """Read the stream until it ends (the reader thread); why it ended."""
        try:
            for msg in self._call:
                on_message(msg)
                with self._cond:
                    self._cond.notify_all()
            reason = "the broker ended the session"
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            reason = f"lost the broker at {self.address} ({code})"
        self._end()
        return reason

    def close(self) -> None:
        with self._cond:
            if self._closing:
                return
            self._closing = True
        self._out.put(_STOP)
        self._call.cancel()
        self._channel.close()
        self._end()

    def _end(self) -> None:
        with self._cond:
            self._ended = True
            self._cond.notify_all()
