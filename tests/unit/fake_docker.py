"""A fake Docker daemon for unit tests: the Engine API's HTTP on a unix socket.

It answers the few calls acbslurm makes (create, attach, start, wait, stop, kill,
delete, containers/json, info, version) from a small in-memory model of containers,
records every request, and lets a test script any route's answer: a status and body,
raw bytes (a truncated or garbled reply, or a connection closed mid-answer), or
silence. It is a test double for the daemon's HTTP API only; the integration tests use
the real rootless Docker.

    def test_x(fake_docker: FakeDocker) -> None:
        fake_docker.on("GET", "/info", Answer(500, {"message": "boom"}))
        api = EngineApi(fake_docker.host, timeout=2)
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import re
import shutil
import signal
import socket
import socketserver
import struct
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import pytest


@dataclass
class Request:
    method: str
    path: str  # as sent: with the /v1.41 prefix and the query
    body: Any  # the parsed JSON body (None when there was none)
    route: str  # the path without the version prefix and the query
    query: dict[str, str]
    version: str | None  # "1.41" from /v1.41/..., None when unversioned


@dataclass
class Answer:
    """An HTTP answer; ``body`` bytes go as they are, anything else as JSON (None: none)."""

    status: int = 200
    body: Any = None


@dataclass
class Raw:
    """These bytes and nothing more, then the connection closes.

    With ``until_client_closes`` the fake keeps its end open until the client closes
    the connection, and records that in ``FakeDocker.closed_by_client`` (a socket leak
    shows as a request missing there).
    """

    data: bytes
    until_client_closes: bool = False


@dataclass
class Hang:
    """No answer at all (a stuck daemon) until the fake dies or the test ends."""


Reply = Answer | Raw | Hang
# A callable gets the request and returns a Reply, or None to let the model answer:
# a hook to send a signal or let the daemon die at the right moment.
Script = Reply | Callable[[Request], Reply | None]


@dataclass
class Program:
    """What a started container does: writes ``output`` frames (1 stdout, 2 stderr),
    then exits with ``exit_code``; with ``exit_code`` None it runs until stopped."""

    output: list[tuple[int, bytes]] = field(default_factory=list)
    exit_code: int | None = 0
    # With ``echo_stdin`` (and a container created with OpenStdin) it is `cat`: what
    # comes on the attach connection goes back as stdout, and it exits ``exit_code``
    # when its stdin ends (the client's half-close).
    echo_stdin: bool = False
    # A signal number (as /kill?signal= names it) -> the exit code it ends with;
    # any other signal is only recorded in ``Container.signals``.
    exits_on: dict[int, int] = field(default_factory=dict)


@dataclass
class Container:
    id: str
    name: str
    config: dict[str, Any]
    program: Program
    state: str = "created"  # created, running, paused, exited; removed ones leave the dict
    exit_code: int | None = None
    signals: list[int] = field(default_factory=list)  # /kill?signal=N received
    resizes: list[tuple[int, int]] = field(default_factory=list)  # (rows, columns)

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.config.get("Labels") or {})


@dataclass
class _Scripted:
    method: str
    route: str  # a glob (fnmatch: * matches / too)
    reply: Script
    times: int | None


def frame(kind: int, data: bytes) -> bytes:
    """One frame of Docker's multiplexed stream: kind, 3 zero bytes, big-endian size."""
    return bytes([kind, 0, 0, 0]) + struct.pack(">I", len(data)) + data


REASONS = {200: "OK", 201: "Created", 204: "No Content", 304: "Not Modified"}
REASONS |= {400: "Bad Request", 404: "Not Found", 409: "Conflict", 500: "Server Error"}


def _version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split("."))


class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True
    block_on_close = False  # a hanging answer must not hold up the test's teardown
    fake: FakeDocker


class _Handler(socketserver.BaseRequestHandler):
    """One connection, one request (the client speaks HTTP/1.0 or upgrades)."""

    def handle(self) -> None:
        fake: FakeDocker = self.server.fake  # type: ignore[attr-defined]
        conn: socket.socket = self.request
        with contextlib.suppress(OSError):  # the client went away first
            req = _read_request(conn)
            if req is not None:
                fake.serve(req, conn)


def _read_request(conn: socket.socket) -> Request | None:
    data = b""
    while b"\r\n\r\n" not in data:
        more = conn.recv(65536)
        if not more:
            return None
        data += more
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])}
    size = int(headers.get("content-length", "0"))
    while len(body) < size:
        more = conn.recv(65536)
        if not more:
            break
        body += more
    url = urlsplit(target)
    m = re.fullmatch(r"/v(\d+\.\d+)(/.*)", url.path)
    version, route = (m.group(1), m.group(2)) if m else (None, url.path)
    query = {k: v[-1] for k, v in parse_qs(url.query).items()}
    return Request(method, target, json.loads(body) if body else None, route, query, version)


class FakeDocker:
    """The daemon: ``host`` is its DOCKER_HOST; state changes under ``cond``."""

    def __init__(self, sock_path: str, listen_as: int | None = None) -> None:
        self.path = sock_path
        self.host = f"unix://{sock_path}"
        self.requests: list[Request] = []
        self.closed_by_client: list[Request] = []
        self.containers: dict[str, Container] = {}
        self.program = Program()  # what containers created from now on do
        self.info: dict[str, Any] = {"CgroupDriver": "systemd", "ServerVersion": "fake"}
        self.images: set[str] | None = None  # None: every image is there
        self.min_api_version: str | None = None  # as Docker >= 29: refuse older clients
        # The newest version it speaks, sent as dockerd does in every answer's headers
        # (None: no such header, as behind a proxy that drops it); newer is refused.
        self.api_version: str | None = "1.47"
        self.dead = False
        self.cond = threading.Condition()  # guards everything above; notified on changes
        self._scripts: list[_Scripted] = []
        self._server = _Server(sock_path, _Handler, bind_and_activate=False)
        try:
            self._server.server_bind()
            self._listen(listen_as)
        except BaseException:
            self._server.server_close()
            raise
        self._server.fake = self
        threading.Thread(target=self._serve, daemon=True).start()

    def _listen(self, uid: int | None) -> None:
        """listen(2), as ``uid`` when given (root only): a client's SO_PEERCRED are the
        credentials the daemon had when it listened, so the fake is then uid's daemon
        as a rootless dockerd is its user's. The effective uid alone, for that one call:
        the kernel reports it, and root gets it back at once."""
        if uid is None:
            self._server.server_activate()
            return
        os.seteuid(uid)
        try:
            self._server.server_activate()
        finally:
            os.seteuid(0)

    def _serve(self) -> None:
        # The real daemon is another process: its threads (which inherit this mask)
        # must not take the SIGTERM/SIGINT a test sends to the process under test.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
        self._server.serve_forever(poll_interval=0.05)

    # -- what tests use ------------------------------------------------------------
    def on(self, method: str, route: str, reply: Script, times: int | None = None) -> None:
        """Answer ``method route`` with ``reply`` instead of the model, ``times`` times
        (None: always). ``route`` is a glob over the path without the version prefix and
        the query, e.g. "/containers/*/wait"; the latest matching script wins."""
        with self.cond:
            self._scripts.append(_Scripted(method, route, reply, times))

    def calls(self, method: str | None = None, route: str = "*") -> list[Request]:
        """The requests received so far, those matching ``method`` and ``route`` only."""
        with self.cond:
            return [
                r
                for r in self.requests
                if (method is None or r.method == method) and fnmatch.fnmatch(r.route, route)
            ]

    def add_container(self, labels: dict[str, str], running: bool = True, name: str = "") -> str:
        """A container that already exists (as one a job left behind); its id."""
        cid = os.urandom(32).hex()
        c = Container(cid, name or cid[:12], {"Labels": labels}, Program(exit_code=None))
        c.state = "running" if running else "exited"
        with self.cond:
            self.containers[cid] = c
        return cid

    def stop_listening(self) -> None:
        """What a dockerd stopped gracefully does first: new connections fail (the socket
        file is gone) while open ones go on, so a container's wait still gets its code."""
        self._server.shutdown()  # never called from the serving thread itself
        self._server.server_close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def die(self) -> None:
        """The daemon goes away: open connections close unanswered (an answer under way
        stops where it is) and new ones fail: the socket file is gone."""
        with self.cond:
            if self.dead:
                return
            self.dead = True
            self.cond.notify_all()
        self._server.shutdown()  # never called from the serving thread itself
        self._server.server_close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    # -- serving -------------------------------------------------------------------
    def serve(self, req: Request, conn: socket.socket) -> None:
        with self.cond:
            self.requests.append(req)
            self.cond.notify_all()
            script = self._script_for(req)
        reply = script(req) if callable(script) else script
        if reply is None:
            reply = self._model(req, conn)  # None: it answered on the connection itself
        if isinstance(reply, Answer):
            conn.sendall(self._answer_bytes(reply))
        elif isinstance(reply, Raw):
            conn.sendall(reply.data)
            if reply.until_client_closes:
                self._wait_client_close(req, conn)
        elif isinstance(reply, Hang):
            with self.cond:
                self.cond.wait_for(lambda: self.dead)

    def _script_for(self, req: Request) -> Script | None:
        for s in reversed(self._scripts):
            if s.method == req.method and fnmatch.fnmatch(req.route, s.route):
                if s.times is not None:
                    if s.times == 0:
                        continue
                    s.times -= 1
                return s.reply
        return None

    def _answer_bytes(self, a: Answer) -> bytes:
        body = a.body if isinstance(a.body, bytes) else b""
        if a.body is not None and not isinstance(a.body, bytes):
            body = json.dumps(a.body).encode()
        version = f"Api-Version: {self.api_version}\r\n" if self.api_version else ""
        head = (
            f"HTTP/1.1 {a.status} {REASONS.get(a.status, 'Status')}\r\n"
            f"{version}Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        )
        return head.encode() + body

    def _wait_client_close(self, req: Request, conn: socket.socket) -> None:
        conn.settimeout(5.0)
        with contextlib.suppress(TimeoutError):
            while conn.recv(4096):
                pass
            with self.cond:
                self.closed_by_client.append(req)
                self.cond.notify_all()

    # -- the model: just enough of dockerd ------------------------------------------
    def _model(self, req: Request, conn: socket.socket) -> Reply | None:
        too_old = self._too_old(req)
        if too_old is not None:
            return too_old
        route, method = req.route, req.method
        if (method, route) == ("GET", "/version"):
            oldest, newest = self.min_api_version or "1.24", self.api_version or "1.47"
            return Answer(200, {"ApiVersion": newest, "MinAPIVersion": oldest, "Version": "fake"})
        if (method, route) == ("GET", "/_ping"):
            return Answer(200, b"OK")
        if (method, route) == ("GET", "/info"):
            return Answer(200, self.info)
        if (method, route) == ("GET", "/containers/json"):
            return Answer(200, self._list(req.query))
        if (method, route) == ("POST", "/containers/create"):
            return self._create(req)
        m = re.fullmatch(r"/containers/([^/]+)(/[a-z]+)?", route)
        if not m:
            return Answer(404, {"message": "page not found"})
        with self.cond:
            c = self._find(unquote(m.group(1)))
        if c is None:
            return Answer(404, {"message": f"No such container: {m.group(1)}"})
        action = (method, m.group(2) or "")
        if action in (("POST", "/attach"), ("POST", "/wait")):
            streams = self._attach if action[1] == "/attach" else self._wait
            streams(c, conn)  # answers on the connection itself
            return None
        with self.cond:
            reply = self._job_control(c, action, req) or self._act(c, action, req)
            self.cond.notify_all()
        return reply

    def _too_old(self, req: Request) -> Reply | None:
        """Docker >= 29's answer to a client below its minimum API version (and every
        dockerd's to one above its newest), word for word."""
        low, high = self.min_api_version, self.api_version
        if high and req.version and _version_tuple(req.version) > _version_tuple(high):
            return Answer(
                400,
                {
                    "message": f"client version {req.version} is too new. Maximum "
                    f"supported API version is {high}"
                },
            )
        if not (low and req.version and _version_tuple(req.version) < _version_tuple(low)):
            return None
        return Answer(
            400,
            {
                "message": f"client version {req.version} is too old. Minimum supported "
                f"API version is {low}, please upgrade your client to a newer version"
            },
        )

    def _act(self, c: Container, action: tuple[str, str], req: Request) -> Reply:
        """start, stop, kill, inspect or delete ``c`` (under ``self.cond``)."""
        if action == ("POST", "/start"):
            if c.state != "created":
                return Answer(304)
            c.state = "running"
            if c.program.exit_code is not None and not c.program.echo_stdin:
                self._exit(c, c.program.exit_code)
        elif action in (("POST", "/stop"), ("POST", "/kill")):
            if c.state != "running":
                return (
                    Answer(304) if action[1] == "/stop" else Answer(409, {"message": "not running"})
                )
            self._exit(c, 143 if action[1] == "/stop" else 137)
        elif action == ("GET", "/json"):  # inspect, the fields acbslurm reads
            return Answer(200, {"Id": c.id, "State": {"Status": c.state}})
        elif action == ("DELETE", ""):
            if c.state == "running" and req.query.get("force") != "1":
                return Answer(409, {"message": "stop the container before removing it"})
            if c.state == "running":
                self._exit(c, 137)
            del self.containers[c.id]
        else:
            return Answer(404, {"message": "page not found"})
        return Answer(204)

    def _job_control(self, c: Container, action: tuple[str, str], req: Request) -> Reply | None:
        """A signal, pause, unpause or resize of ``c``; None for the other actions."""
        if action == ("POST", "/kill") and req.query.get("signal"):
            return self._signal(c, int(req.query["signal"]))
        if action in (("POST", "/pause"), ("POST", "/unpause")):
            return self._pause(c, action[1] == "/pause")
        if action == ("POST", "/resize"):
            c.resizes.append((int(req.query["h"]), int(req.query["w"])))
            return Answer(200)
        return None

    def _signal(self, c: Container, signum: int) -> Reply:
        if c.state not in ("running", "paused"):
            return Answer(409, {"message": f"Container {c.id} is not running"})
        c.signals.append(signum)
        if signum in c.program.exits_on:
            self._exit(c, c.program.exits_on[signum])
        return Answer(204)

    @staticmethod
    def _pause(c: Container, pause: bool) -> Reply:
        if c.state != ("running" if pause else "paused"):
            return Answer(
                409, {"message": f"Container {c.id} is not {'running' if pause else 'paused'}"}
            )
        c.state = "paused" if pause else "running"
        return Answer(204)

    def _find(self, ident: str) -> Container | None:
        for c in self.containers.values():
            if ident in (c.name, c.id) or (len(ident) >= 12 and c.id.startswith(ident)):
                return c
        return None

    def _exit(self, c: Container, code: int) -> None:
        c.state, c.exit_code = "exited", code

    def _list(self, query: dict[str, str]) -> list[dict[str, Any]]:
        wanted = json.loads(query.get("filters", "{}")).get("label", [])
        with self.cond:
            found = [
                c
                for c in self.containers.values()
                if (query.get("all") == "1" or c.state == "running")
                and all(c.labels.get(k) == v for k, _, v in (w.partition("=") for w in wanted))
            ]
            return [
                {"Id": c.id, "Names": [f"/{c.name}"], "Labels": c.labels, "State": c.state}
                for c in found
            ]

    def _create(self, req: Request) -> Answer:
        config = req.body or {}
        image = config.get("Image", "")
        if self.images is not None and image not in self.images:
            return Answer(404, {"message": f"No such image: {image}"})
        cid = os.urandom(32).hex()
        name = req.query.get("name", cid[:12])
        with self.cond:
            if self._find(name) is not None:
                return Answer(409, {"message": f'Conflict. The container name "/{name}" is in use'})
            self.containers[cid] = Container(cid, name, config, self.program)
            self.cond.notify_all()
        return Answer(201, {"Id": cid, "Warnings": []})

    def _gone(self, c: Container) -> bool:
        return self.dead or self.containers.get(c.id) is not c

    def _attach(self, c: Container, conn: socket.socket) -> None:
        """Upgrade, then the output once the container started, until it stops."""
        conn.sendall(
            b"HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\n"
            b"Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n"
        )
        with self.cond:
            self.cond.wait_for(lambda: c.state != "created" or self._gone(c))
            if self.dead:
                return
        tty = bool(c.config.get("Tty"))
        pack = (lambda _k, d: d) if tty else frame  # a tty: one raw stream
        conn.sendall(b"".join(pack(k, d) for k, d in c.program.output))
        if c.program.echo_stdin and c.config.get("OpenStdin"):
            self._echo(c, conn, pack)
        with self.cond:
            self.cond.wait_for(lambda: c.state == "exited" or self._gone(c))

    def _echo(self, c: Container, conn: socket.socket, pack: Callable[[int, bytes], bytes]) -> None:
        """`cat`: stdin back as stdout until the client half-closes, then exit."""
        while data := conn.recv(65536):
            conn.sendall(pack(1, data))
        with self.cond:
            if c.state == "running":
                self._exit(c, c.program.exit_code or 0)
            self.cond.notify_all()

    def _wait(self, c: Container, conn: socket.socket) -> None:
        """As dockerd: the headers at once, the body when the container stops."""
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n")
        with self.cond:
            self.cond.wait_for(lambda: c.state == "exited" or self._gone(c))
            if self.dead:
                return  # the daemon died: the answer ends after its headers
            code = 137 if c.exit_code is None else c.exit_code
        conn.sendall(json.dumps({"StatusCode": code, "Error": None}).encode())


@pytest.fixture
def fake_docker(tmp_path: Path) -> Iterator[FakeDocker]:
    # A unix socket's path has 107 bytes at most; a deep TMPDIR needs a shorter one.
    short = None if len(str(tmp_path)) < 90 else tempfile.mkdtemp(prefix="fakedocker")
    fake = FakeDocker(os.path.join(short or str(tmp_path), "docker.sock"))
    yield fake
    fake.die()
    if short:
        shutil.rmtree(short, ignore_errors=True)
