"""Where a running pool tells its user the gateway's address: a file only they can read.

A pool job's gateway binds first (port 0: a free port on the node) and then writes
``acbslurm-serve-<JOBID>.json`` in the job's working directory (where its output
files go, which `acbslurm status` finds through Slurm), mode 0600, atomically (a
reader never sees half a file). The file is removed when the pool stops.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat

from acbslurm.serve.errors import ServeError

# `acbslurm status` reads these files: no typing at run time there
# (tests/unit/cli/test_status_fast.py).
TYPE_CHECKING = False
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
    """Write ``data`` as JSON to ``path``, mode 0600, replacing the file atomically.

    The temporary file is created new (O_EXCL, never through a link someone planted)
    with mode 0600 from the start, so no other user can open it at any moment.
    """
    tmp = f"{path}.{os.getpid()}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(tmp, flags, 0o600)
    except OSError as exc:
        raise ServeError(f"cannot write the address file {path}: {exc.strerror}") from None
    try:
        os.fchmod(fd, 0o600)  # independent of the umask
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=2)
            fh.write("\n")
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise ServeError(f"cannot write the address file {path}: {exc.strerror}") from None


_MAX_ADDRESS_FILE = 64 * 1024  # a few hundred bytes of JSON in fact


def read(path: str) -> dict[str, Any] | None:
    """The address file's content, or None when it is not there (yet), not readable,
    or not trustworthy: it must be the caller's own and writable by nobody else (in a
    folder others may write, someone could have put an address of theirs there)."""
    try:
        # O_NONBLOCK: a FIFO put there must not hang `acbslurm status`; only a small
        # regular file is an address file.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.getuid() or st.st_mode & 0o022:
            return None
        if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_ADDRESS_FILE:
            return None
        with os.fdopen(fd, encoding="utf-8") as fh:
            fd = -1
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    finally:
        if fd >= 0:
            os.close(fd)
    return data if isinstance(data, dict) else None


def remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
