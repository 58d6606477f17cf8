"""A minimal Docker Engine API client over a unix socket, for the Slurm hooks.

The hooks must be fast and must never hang: importing the Docker SDK alone costs more
than the prolog's whole budget, so the epilog speaks the few HTTP calls it needs
directly, each with a socket timeout.
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any

from acbslurm.errors import DockerError


class DaemonUnreachable(DockerError):
    """No daemon listens on the socket (missing socket file or connection refused)."""


def _quote(text: str) -> str:
    """Percent-encode everything but unreserved characters (no urllib import: speed)."""
    safe = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~"
    return "".join(c if c in safe else "".join(f"%{b:02X}" for b in c.encode()) for c in text)


def socket_path(docker_host: str) -> str:
    """``unix:///run/user/1001/docker.sock`` -> ``/run/user/1001/docker.sock``."""
    if docker_host.startswith("unix://"):
        return docker_host[len("unix://") :]
    if docker_host.startswith("/"):
        return docker_host
    raise DockerError(f"only unix:// Docker hosts are supported here, got {docker_host!r}")


class EngineApi:
    def __init__(self, docker_host: str, timeout: float) -> None:
        self.path = socket_path(docker_host)
        self.timeout = timeout

    def _call(self, method: str, url: str) -> Any:
        # HTTP/1.0: the daemon answers with a plain body and closes the connection.
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            try:
                sock.connect(self.path)
            except (FileNotFoundError, ConnectionRefusedError) as exc:
                raise DaemonUnreachable(
                    f"no Docker daemon at {self.path}: {exc.strerror}"
                ) from None
            sock.sendall(f"{method} {url} HTTP/1.0\r\nHost: docker\r\n\r\n".encode())
            chunks = []
            deadline = time.monotonic() + self.timeout  # a trickling answer must end too
            while True:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no complete answer in {self.timeout:g} s")
                data = sock.recv(65536)
                if not data:
                    break
                chunks.append(data)
        except OSError as exc:
            raise DockerError(f"Docker at {self.path}: {method} {url}: {exc}") from None
        finally:
            sock.close()
        head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
        try:
            status = int(head.split(b" ", 2)[1])
        except (IndexError, ValueError):
            raise DockerError(
                f"Docker at {self.path}: {method} {url}: bad answer {head[:80]!r}"
            ) from None
        if status == 404 and method == "DELETE":
            return None  # already gone
        if status >= 400:
            raise DockerError(f"Docker at {self.path}: {method} {url}: {status} {body[:300]!r}")
        return json.loads(body) if body.strip() else None

    def containers_with_label(self, label: str) -> list[dict[str, Any]]:
        """All containers (running or not) carrying ``label`` (``key=value``)."""
        filters = _quote(json.dumps({"label": [label]}))
        result = self._call("GET", f"/containers/json?all=1&filters={filters}")
        return list(result or [])

    def remove_container(self, container_id: str) -> None:
        """Kill and remove, with its anonymous volumes."""
        self._call("DELETE", f"/containers/{_quote(container_id)}?force=1&v=1")
