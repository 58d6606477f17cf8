"""The broker's local lane: sessions' requests and grants as unix datagrams, beside gRPC.

A client on the broker's host opens a SOCK_SEQPACKET connection to ``<socket>.lane``
and proves with its session's token which session it belongs to; from then on its
requests, releases, cancels and evict answers arrive here, and its grants and
rejections leave here, one serialized protobuf message per datagram. Everything runs
on the server's event loop through reader callbacks, like the gRPC sessions, so the
core still needs no lock.

Why: gRPC's Python layer hands each message between threads and costs most of a
grant's client and server CPU (docs/benchmarks.md, "The GPU broker"); a datagram each
way costs a few system calls. gRPC keeps registration, status, the server's pushes
(yield, evict) and every remote client.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from acbslurm.broker.lane_client import MAX_DATAGRAM
from acbslurm.broker.proto import pb

log = logging.getLogger(__name__)

BACKLOG = 128
OPEN_WITHIN = 5.0  # s a new connection has to present its LaneOpen
MAX_UNOPENED = 64  # connections that have not (yet) presented one


class _Conn:
    """One accepted lane; ``cid`` is 0 until its LaneOpen is accepted."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.cid = 0
        self.backlog: list[bytes] = []  # datagrams the socket buffer had no room for
        self.deadline: asyncio.TimerHandle | None = None


class LaneServer:
    """Listens on ``path``; hands each session's messages to ``handle(cid, msg)``.

    ``check_token(cid, token)`` says whether a LaneOpen is genuine; ``on_close(cid)``
    runs when an opened lane ends (the client exited or closed it): the session ends.
    """

    def __init__(
        self,
        path: str,
        check_token: Callable[[int, bytes], bool],
        handle: Callable[[int, Any], None],
        on_close: Callable[[int], None],
    ) -> None:
        self.path = path
        self._check_token = check_token
        self._handle = handle
        self._on_close = on_close
        self._listener: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._conns: dict[int, _Conn] = {}  # cid -> opened lane
        # Connections still to present a LaneOpen: a local user cannot pile up idle ones.
        self._unopened: set[_Conn] = set()

    def start(self, socket_mode: int) -> None:
        self._loop = asyncio.get_running_loop()
        with contextlib.suppress(FileNotFoundError):
            Path(self.path).unlink()  # the broker socket's owner checked it is not in use
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        old_umask = os.umask(0o777 & ~socket_mode)  # born with its final permissions
        try:
            sock.bind(self.path)
        finally:
            os.umask(old_umask)
        os.chmod(self.path, socket_mode)
        sock.listen(BACKLOG)
        sock.setblocking(False)
        self._listener = sock
        self._loop.add_reader(sock.fileno(), self._accept)

    def close(self) -> None:
        for conn in [*self._conns.values(), *self._unopened]:
            self._close(conn, notify=False)
        if self._listener is not None and self._loop is not None:
            self._loop.remove_reader(self._listener.fileno())
            self._listener.close()
            self._listener = None
            with contextlib.suppress(FileNotFoundError):
                Path(self.path).unlink()

    def is_open(self, cid: int) -> bool:
        return cid in self._conns

    def send(self, cid: int, msg: Any) -> None:
        conn = self._conns.get(cid)
        if conn is not None:
            self._send(conn, msg.SerializeToString())

    def end(self, cid: int) -> None:
        """The session ended elsewhere (its gRPC stream): close its lane."""
        conn = self._conns.get(cid)
        if conn is not None:
            self._close(conn, notify=False)

    # -- event loop callbacks ------------------------------------------------------

    def _accept(self) -> None:
        assert self._listener is not None and self._loop is not None
        try:
            sock, _ = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        if len(self._unopened) >= MAX_UNOPENED:
            sock.close()
            log.warning("refused a lane connection: %d are still to open", MAX_UNOPENED)
            return
        sock.setblocking(False)
        conn = _Conn(sock)
        self._unopened.add(conn)
        conn.deadline = self._loop.call_later(OPEN_WITHIN, self._close, conn, False)
        self._loop.add_reader(sock.fileno(), self._readable, conn)

    def _readable(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(MAX_DATAGRAM)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._close(conn, notify=True)
            return
        try:
            msg = pb.ClientMessage.FromString(data)
        except Exception:  # a malformed datagram ends the lane, never the broker
            log.warning("lane of client %d sent a malformed message; closing it", conn.cid)
            self._close(conn, notify=True)
            return
        if conn.cid:
            self._handle(conn.cid, msg)
        else:
            self._open(conn, msg)

    def _open(self, conn: _Conn, msg: Any) -> None:
        lo = msg.lane_open
        cid = lo.client_id
        if (
            msg.WhichOneof("kind") != "lane_open"
            or cid in self._conns
            or not self._check_token(cid, lo.token)
        ):
            log.warning("refused a lane (client %d): not a session's valid LaneOpen", cid)
            self._close(conn, notify=False)
            return
        conn.cid = cid
        self._conns[cid] = conn
        self._unopened.discard(conn)
        if conn.deadline is not None:
            conn.deadline.cancel()
        self._send(conn, pb.ServerMessage(lane_ready=pb.LaneReady()).SerializeToString())
        log.debug("client %d opened its lane", cid)

    def _send(self, conn: _Conn, data: bytes) -> None:
        if not conn.backlog:
            try:
                conn.sock.send(data)
                return
            except (BlockingIOError, InterruptedError):
                assert self._loop is not None
                self._loop.add_writer(conn.sock.fileno(), self._flush, conn)
            except OSError:
                self._close(conn, notify=True)
                return
        conn.backlog.append(data)

    def _flush(self, conn: _Conn) -> None:
        assert self._loop is not None
        while conn.backlog:
            try:
                conn.sock.send(conn.backlog[0])
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self._close(conn, notify=True)
                return
            conn.backlog.pop(0)
        self._loop.remove_writer(conn.sock.fileno())

    def _close(self, conn: _Conn, notify: bool) -> None:
        assert self._loop is not None
        self._unopened.discard(conn)
        if conn.deadline is not None:
            conn.deadline.cancel()
        if conn.sock.fileno() >= 0:
            self._loop.remove_reader(conn.sock.fileno())
            self._loop.remove_writer(conn.sock.fileno())
            conn.sock.close()
        if conn.cid and self._conns.get(conn.cid) is conn:
            del self._conns[conn.cid]
            if notify:
                self._on_close(conn.cid)


def token_matches(expected: bytes | None, given: bytes) -> bool:
    return expected is not None and hmac.compare_digest(expected, given)
