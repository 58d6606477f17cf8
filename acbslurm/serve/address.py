"""Where a running pool tells its user the gateway's address: a file only they can read.

A pool job's gateway binds first (port 0: a free port on the node) and then writes
``acbslurm-serve-<JOBID>.json`` in the job's working directory (where its output
files go, which `acbslurm status` finds through Slurm), mode 0600, atomically (a
reader never sees half a file). The file is removed when the pool stops.
"""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING

from acbslurm import jobfiles
from acbslurm.serve.errors import ServeError

if TYPE_CHECKING:
    from typing import Any

FILE_NAME = "acbslurm-serve-{job_id}.json"


def address_file(work_dir: str, job_id: str) -> str:
    return os.path.join(work_dir, FILE_NAME.format(job_id=job_id))


def bind(listen: str) -> socket.socket:
    """A listening TCP socket on ``HOST:PORT`` (port 0: the kernel picks a free one)."""
    host, port = listen.rsplit(":", 1)
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, int(port)))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise ServeError(f"cannot listen on {listen}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


def reachable_host(bound: str) -> str:
    """The name to connect to: the bound address, or this node's name for a wildcard."""
    if bound in ("0.0.0.0", "::", ""):  # noqa: S104 - reading a bound address, not binding
        return socket.gethostname()
    return bound


def describe(sock: socket.socket, models: dict[str, str]) -> dict[str, Any]:
    """The file's content: the bound address, a URL for OpenAI clients, the models' states."""
    bound_host, port = sock.getsockname()[:2]
    host = reachable_host(str(bound_host))
    shown = f"[{host}]" if ":" in host else host
    return {
        "url": f"http://{shown}:{port}/v1",
        "host": host,
        "port": int(port),
        "bound": f"[{bound_host}]:{port}" if ":" in str(bound_host) else f"{bound_host}:{port}",
        "job_id": os.environ.get("SLURM_JOB_ID") or None,
        "node": socket.gethostname(),
        "pid": os.getpid(),
        "models": models,
    }


def write_private(path: str, data: dict[str, Any]) -> None:
    """``jobfiles.write_private``: JSON, mode 0600, replaced atomically; a ServeError
    naming the file when it cannot be written."""
    try:
        jobfiles.write_private(path, data)
    except jobfiles.JobFileError as exc:
        raise ServeError(
            str(exc).replace("cannot write ", "cannot write the address file ")
        ) from None


def read(path: str) -> dict[str, Any] | None:
    """The address file's content (``jobfiles.read_private``: None when it is not there,
    not the caller's own, or writable by others)."""
    return jobfiles.read_private(path)


def remove(path: str) -> None:
    jobfiles.remove(path)
