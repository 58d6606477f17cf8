"""Files a running job keeps for its user in the job's working directory: what `acbslurm
status` shows about the job beyond Slurm's own fields (a pool's address, the ports a
container publishes).

The working directory is where the job's output goes, on a file system the login node
sees too, and Slurm names it (squeue's WorkDir), so `status` finds the files without
asking the node. Each is written atomically with mode 0600, and read only when it is
the caller's own and writable by nobody else: in a folder others may write, someone
could have put a file of theirs there.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat

from acbslurm.errors import AcbslurmError

TYPE_CHECKING = False  # a lean-path module: CONTRIBUTING.md, "Lean imports"
if TYPE_CHECKING:
    from typing import Any


class JobFileError(AcbslurmError):
    """A job's file for its user could not be written (the message names it and why)."""


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
        raise JobFileError(f"cannot write {path}: {exc.strerror}") from None
    try:
        os.fchmod(fd, 0o600)  # independent of the umask
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=2)
            fh.write("\n")
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise JobFileError(f"cannot write {path}: {exc.strerror}") from None


_MAX_FILE = 64 * 1024  # a few hundred bytes of JSON in fact


def read_private(path: str) -> dict[str, Any] | None:
    """The file's content, or None when it is not there (yet), not readable, or not
    trustworthy: it must be the caller's own and writable by nobody else."""
    try:
        # O_NONBLOCK: a FIFO put there must not hang `acbslurm status`; only a small
        # regular file is a job's file.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.getuid() or st.st_mode & 0o022:
            return None
        if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_FILE:
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
