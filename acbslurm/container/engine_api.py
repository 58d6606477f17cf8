"""A minimal Docker Engine API client over a unix socket, for the Slurm hooks.

The hooks must be fast and must never hang: importing the Docker SDK alone costs more
than the prolog's whole budget, so the epilog speaks the few HTTP calls it needs
directly, each with a socket timeout.
"""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any
from urllib.parse import quote, urlencode

from acbslurm.errors import DockerError


class DaemonUnreachable(DockerError):
    """No daemon listens on the socket (missing socket file or connection refused)."""


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            sock.close()
            raise DaemonUnreachable(f"no Docker daemon at {self._path}: {exc.strerror}") from None
        except OSError:
            sock.close()
            raise
        self.sock = sock


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
        conn = _UnixConnection(self.path, self.timeout)
        try:
            conn.request(method, url)
            resp = conn.getresponse()
            body = resp.read()
        except DockerError:
            raise
        except (OSError, http.client.HTTPException) as exc:
            raise DockerError(f"Docker at {self.path}: {method} {url}: {exc}") from None
        finally:
            conn.close()
        if resp.status == 404 and method == "DELETE":
            return None  # already gone
        if resp.status >= 400:
            raise DockerError(
                f"Docker at {self.path}: {method} {url}: {resp.status} {body[:300]!r}"
            )
        return json.loads(body) if body else None

    def containers_with_label(self, label: str) -> list[dict[str, Any]]:
        """All containers (running or not) carrying ``label`` (``key=value``)."""
        q = urlencode({"all": "1", "filters": json.dumps({"label": [label]})})
        result = self._call("GET", f"/containers/json?{q}")
        return list(result or [])

    def remove_container(self, container_id: str) -> None:
        """Kill and remove, with its anonymous volumes."""
        self._call("DELETE", f"/containers/{quote(container_id)}?force=1&v=1")
