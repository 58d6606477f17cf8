"""The client's end of the local lane (see ``lane_server``): blocking datagrams.

The lane carries only this session's requests and the answers to them, so the
thread that waits for a grant reads the lane itself (no reader thread to wake it).
"""

from __future__ import annotations

import contextlib
import os
import socket
from typing import Any

from acbslurm.broker.proto import pb

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
    def __init__(self, path: str, client_id: int, token: bytes) -> None:
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._sock.settimeout(OPEN_TIMEOUT)
            self._sock.connect(path)
            self.send(pb.ClientMessage(lane_open=pb.LaneOpen(client_id=client_id, token=token)))
            reply = self.recv(OPEN_TIMEOUT)
            if reply is None or reply.WhichOneof("kind") != "lane_ready":
                raise LaneClosed("the broker did not open the lane")
        except BaseException:
            self._sock.close()
            raise

    def send(self, msg: Any) -> None:
        # One send is one datagram: sends from several threads never interleave.
        self._sock.sendall(msg.SerializeToString())

    def recv(self, timeout: float | None) -> Any | None:
        """The next message; None after ``timeout`` s (None = wait forever)."""
        self._sock.settimeout(timeout)
        try:
            data = self._sock.recv(MAX_DATAGRAM)
        except TimeoutError:
            return None
        if not data:
            raise LaneClosed("the broker closed the lane")
        return pb.ServerMessage.FromString(data)

    def close(self) -> None:
        # shutdown() first: close() alone does not wake a thread blocked in recv().
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
