"""A small Docker Engine API client over a unix socket (the hooks and `acbslurm run`).

Why not the Docker SDK: importing it (requests, urllib3) costs ~100 ms, more than the
prolog's whole budget and most of `acbslurm run`'s allowance over a plain `docker run`.
The calls needed are few and stable (Engine API >= 1.40, which has DeviceRequests):
every one opens its own connection with a timeout, so nothing here can hang, and a
second thread (a stop on SIGTERM) never shares a connection with a waiting one.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from collections.abc import Iterator

from acbslurm.errors import DockerError

# typing costs a hook ~4 ms to import; annotations are strings (PEP 563).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class DaemonUnreachable(DockerError):
    """No daemon listens on the socket (missing socket file or connection refused)."""


class EngineError(DockerError):
    """The daemon answered with an HTTP error."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)


def _quote(text: str, keep: str = "") -> str:
    """Percent-encode everything but unreserved characters and ``keep`` (no urllib: speed)."""
    safe = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~" + keep
    return "".join(c if c in safe else "".join(f"%{b:02X}" for b in c.encode()) for c in text)


def socket_path(docker_host: str) -> str:
    """``unix:///run/user/1001/docker.sock`` -> ``/run/user/1001/docker.sock``."""
    if docker_host.startswith("unix://"):
        return docker_host[len("unix://") :]
    if docker_host.startswith("/"):
        return docker_host
    raise DockerError(f"only unix:// Docker hosts are supported, got {docker_host!r}")


def _status_and_rest(data: bytes, what: str) -> tuple[int, bytes, bytes]:
    head, _, rest = data.partition(b"\r\n\r\n")
    try:
        status = int(head.split(b" ", 2)[1])
    except (IndexError, ValueError):
        raise DockerError(f"{what}: bad answer {head[:80]!r}") from None
    return status, head, rest


class AttachStream:
    """The container's multiplexed stdout/stderr (Docker's 8-byte frame headers)."""

    def __init__(self, sock: socket.socket, pending: bytes) -> None:
        self.sock = sock
        self.buf = pending

    def _fill(self, n: int) -> bool:
        while len(self.buf) < n:
            data = self.sock.recv(65536)
            if not data:
                return False
            self.buf += data
        return True

    def frames(self) -> Iterator[tuple[int, bytes]]:
        """(1 for stdout or 2 for stderr, bytes) until the container's streams close."""
        try:
            while self._fill(8):
                kind, size = self.buf[0], struct.unpack(">I", self.buf[4:8])[0]
                if not self._fill(8 + size):
                    return
                yield kind, self.buf[8 : 8 + size]
                self.buf = self.buf[8 + size :]
        finally:
            self.sock.close()


class EngineApi:
    def __init__(self, docker_host: str, timeout: float) -> None:
        self.host = docker_host
        self.path = socket_path(docker_host)
        self.timeout = timeout

    def _connect(self, timeout: float | None) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(self.path)
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            sock.close()
            raise DaemonUnreachable(f"no Docker daemon at {self.host}: {exc.strerror}") from None
        except OSError as exc:
            sock.close()
            raise DockerError(f"Docker at {self.host}: {exc}") from None
        return sock

    def _request(self, method: str, url: str, body: Any = None) -> bytes:
        payload = b"" if body is None else json.dumps(body).encode()
        head = f"{method} {url} HTTP/1.0\r\nHost: docker\r\n"
        if body is not None:
            head += "Content-Type: application/json\r\n"
        return (head + f"Content-Length: {len(payload)}\r\n\r\n").encode() + payload

    def _exchange(
        self, method: str, url: str, body: Any, idle: float | None, total: float | None
    ) -> tuple[int, bytes, str]:
        """(status, body, what) of one request; ``idle`` bounds each read, ``total`` all."""
        what = f"Docker at {self.host}: {method} {url.split('?')[0]}"
        sock = self._connect(idle)
        try:
            sock.sendall(self._request(method, url, body))
            chunks = []
            deadline = None if total is None else time.monotonic() + total
            while True:
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"no complete answer in {total:g} s")
                data = sock.recv(65536)
                if not data:
                    break
                chunks.append(data)
        except OSError as exc:
            raise DockerError(f"{what}: {exc}") from None
        finally:
            sock.close()
        status, _, rest = _status_and_rest(b"".join(chunks), what)
        if status >= 400:
            try:
                message = str(json.loads(rest)["message"])
            except (ValueError, KeyError, TypeError):
                message = rest[:300].decode(errors="replace")
            raise EngineError(status, f"{what}: {message}")
        return status, rest, what

    def call(self, method: str, url: str, body: Any = None, timeout: float | None = -1.0) -> Any:
        """One request; HTTP/1.0, so the daemon sends a plain body and closes.

        ``timeout`` None waits forever (only for /wait); the default is the client's.
        """
        limit = self.timeout if timeout == -1.0 else timeout
        _, rest, _ = self._exchange(method, url, body, limit, limit)
        return json.loads(rest) if rest.strip() else None

    # -- the calls acbslurm needs ---------------------------------------------------
    def info(self) -> dict[str, Any]:
        return dict(self.call("GET", "/info"))

    def containers_with_label(self, label: str, stopped: bool = True) -> list[dict[str, Any]]:
        """Containers carrying ``label`` (``key=value``), stopped ones too unless all=False."""
        filters = _quote(json.dumps({"label": [label]}))
        return list(
            self.call("GET", f"/containers/json?all={int(stopped)}&filters={filters}") or []
        )

    def image_inspect(self, ref: str) -> dict[str, Any]:
        """The image ``ref`` as the daemon has it; ``EngineError`` 404 when it has not."""
        return dict(self.call("GET", f"/images/{_quote(ref, keep='/:@')}/json"))

    def pull(self, query: dict[str, str], idle: float = 300.0) -> list[dict[str, Any]]:
        """``POST /images/create`` (``fromImage``, ``tag``): the daemon's progress messages.

        The answer is 200 as soon as the pull starts; a failure later on (a layer, the
        registry's authorisation) comes as a message with ``error``, raised here as an
        ``EngineError`` 500. ``idle`` bounds the wait for the next message only: a big
        image may take long, a registry that stops answering does not hang the job.
        """
        params = "&".join(f"{k}={_quote(v)}" for k, v in query.items())
        _, rest, what = self._exchange("POST", f"/images/create?{params}", None, idle, None)
        messages: list[dict[str, Any]] = []
        for line in rest.splitlines():
            if not line.strip():
                continue
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if isinstance(msg, dict):
                if msg.get("error"):
                    raise EngineError(500, f"{what}: {msg['error']}")
                messages.append(msg)
        return messages

    def create(self, name: str | None, config: dict[str, Any]) -> str:
        url = "/containers/create" + (f"?name={_quote(name)}" if name else "")
        return str(self.call("POST", url, config)["Id"])

    def attach(self, cid: str) -> AttachStream:
        """Attach to stdout/stderr (with what was written so far), before or after start."""
        sock = self._connect(self.timeout)
        url = f"/containers/{_quote(cid)}/attach?stream=1&stdout=1&stderr=1&logs=1"
        try:
            sock.sendall(
                f"POST {url} HTTP/1.1\r\nHost: docker\r\nConnection: Upgrade\r\n"
                "Upgrade: tcp\r\nContent-Length: 0\r\n\r\n".encode()
            )
            data = b""
            while b"\r\n\r\n" not in data:
                more = sock.recv(65536)
                if not more:
                    raise DockerError(f"Docker at {self.host}: attach: connection closed")
                data += more
        except OSError as exc:
            sock.close()
            raise DockerError(f"Docker at {self.host}: attach: {exc}") from None
        status, _, rest = _status_and_rest(data, f"Docker at {self.host}: attach")
        if status not in (101, 200):
            sock.close()
            raise EngineError(status, f"Docker at {self.host}: attach: HTTP {status}")
        sock.settimeout(None)  # output may pause for as long as the job runs
        return AttachStream(sock, rest)

    def start(self, cid: str) -> None:
        self.call("POST", f"/containers/{_quote(cid)}/start")

    def wait(self, cid: str) -> int:
        """Block until the container stops; its exit code."""
        return int(self.call("POST", f"/containers/{_quote(cid)}/wait", timeout=None)["StatusCode"])

    def stop(self, cid: str, grace: int) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds (the daemon does the waiting)."""
        self.call("POST", f"/containers/{_quote(cid)}/stop?t={grace}", timeout=grace + self.timeout)

    def kill(self, cid: str) -> None:
        self.call("POST", f"/containers/{_quote(cid)}/kill")

    def remove_container(self, cid: str) -> None:
        """Kill and remove, with its anonymous volumes; a missing container is fine."""
        try:
            self.call("DELETE", f"/containers/{_quote(cid)}?force=1&v=1")
        except EngineError as exc:
            if exc.status != 404:
                raise
