"""The client's end of the local lane (see ``lane_server``): blocking datagrams.

The lane carries only this session's requests and the answers to them, so the
thread that waits for a grant reads the lane itself (no reader thread to wake it):
that is why it is a transport of its own (``transport.Transport``) beside the gRPC
stream. Several threads waiting at once take turns: one reads and hands every answer
to the client; the others wait until theirs has been read for them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from collections.abc import Callable
from typing import Any

from acbslurm.broker.proto import pb
from acbslurm.broker.transport import remaining

log = logging.getLogger(__name__)

# Both ends' receive buffer: a Release with residency on every device stays far below.
MAX_DATAGRAM = 64 * 1024
OPEN_TIMEOUT = 2.0


def lane_wanted(env: dict[str, str] | None = None) -> bool:
    """``ACBSLURM_BROKER_LANE=0`` keeps a client on gRPC alone."""
    value = (env if env is not None else os.environ).get("ACBSLURM_BROKER_LANE", "1")
    return value.strip().lower() not in ("0", "no", "off", "false")


class LaneClosed(Exception):
    """The broker closed the lane (it stopped, or ended the session)."""


class Lane:
    """One session's lane; ``on_message`` gets every message read from it."""

    on_lane = True

    def __init__(
        self, path: str, client_id: int, token: bytes, on_message: Callable[[Any], None]
    ) -> None:
        self._on_message = on_message
        # Whose turn it is to read; notified when a reader is done, and at close.
        self._turn = threading.Condition(threading.Lock())
        self._reading = False
        self._closed = False
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._sock.settimeout(OPEN_TIMEOUT)
            self._sock.connect(path)
            self._sock.sendall(
                pb.ClientMessage(
                    lane_open=pb.LaneOpen(client_id=client_id, token=token)
                ).SerializeToString()
            )
            reply = self._recv(OPEN_TIMEOUT)
            if reply is None or reply.WhichOneof("kind") != "lane_ready":
                raise LaneClosed("the broker did not open the lane")
        except BaseException:
            self._sock.close()
            raise

    @property
    def closed(self) -> bool:
        return self._closed

    def send(self, msg: Any) -> None:
        """One send is one datagram: sends from several threads never interleave.

        A failure means the broker is going away: the client's reader notices the
        stream end, reconnects and sends the waiting requests again; releases and
        eviction answers die with the session that they belonged to.
        """
        try:
            self._sock.sendall(msg.SerializeToString())
        except OSError:
            log.debug("the lane failed; the session is ending")

    def wait(self, done: threading.Event, deadline: float | None) -> None:
        """Read the lane until ``done`` is set, ``deadline`` passes or the lane closes."""
        while self._take_turn(done, deadline):
            msg = None
            try:
                msg = self._recv(remaining(deadline))
            except (OSError, LaneClosed):
                self.close()  # the broker is gone (or ended the session)
            finally:
                # Hand the answer over before the next reader may start: an answer that
                # is not its own would otherwise keep it reading a lane gone quiet.
                if msg is not None:
                    self._on_message(msg)
                with self._turn:
                    self._reading = False
                    self._turn.notify_all()
            if done.is_set():
                return

    def _take_turn(self, done: threading.Event, deadline: float | None) -> bool:
        """Become the reader; False when ``done``, closed or past ``deadline`` first."""
        with self._turn:
            while True:
                left = remaining(deadline)
                if done.is_set() or self._closed or left == 0:
                    return False
                if not self._reading:
                    self._reading = True
                    return True
                self._turn.wait(left)

    def _recv(self, timeout: float | None) -> Any | None:
        """The next message; None after ``timeout`` s (None = wait forever)."""
        # A timeout of 0 would make the socket non-blocking (BlockingIOError).
        self._sock.settimeout(None if timeout is None else max(timeout, 1e-3))
        try:
            data = self._sock.recv(MAX_DATAGRAM)
        except TimeoutError:
            return None
        if not data:
            raise LaneClosed("the broker closed the lane")
        return pb.ServerMessage.FromString(data)

    def close(self) -> None:
        with self._turn:
            self._closed = True
            self._turn.notify_all()
        # shutdown() first: close() alone does not wake a thread blocked in recv().
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
