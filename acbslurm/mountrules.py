"""Which host paths a job may bind-mount: none that leads to a device node.

GPUs reach a container only through ``--gpus`` (the UUIDs Slurm gave the job), so a
mount source is refused when, resolved (symlinks, ``..``, ``//``), it

- is ``/dev`` or under it, or is a character or block device file anywhere;
- is an ancestor of ``/dev`` (that is ``/``): Docker bind mounts are recursive, so
  ``/:/host`` would show the host's ``/dev`` as ``/host/dev``;
- is ``/proc`` or under it: ``/proc/<pid>/root`` and ``/proc/<pid>/fd/`` are links to
  host processes' root directories and open files, device files included. A rootless
  container cannot follow them (it is in another user namespace, and the kernel asks
  for the same one or CAP_SYS_PTRACE there; checked on the sandbox), but a container of
  a rootful daemon could, and no job needs the host's /proc;
- is on, or has mounted below it, a ``devtmpfs`` or ``proc`` file system
  (``/proc/self/mountinfo``): a chroot with ``/dev`` bound into it, a devtmpfs mounted
  somewhere else.

``/sys`` is allowed: sysfs holds no device nodes and no links out of sysfs (its ``dev``
files are ``major:minor`` text), so it shows devices but gives no path to one; its files
that touch hardware (PCI ``resource*``, ``config`` past the header, driver ``bind``)
belong to root, which a rootless container's root is not on the host.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Sequence

from acbslurm.values import frozen


@frozen
class Mount:
    """A bind mount of a job's container: a job spec's ``mounts`` entry, and what
    `acbslurm run --mount` hands Docker (its source resolved and checked there)."""

    source: str
    target: str
    read_only: bool = False

    def as_arg(self) -> str:
        """``SRC:DST[:ro]``, as `acbslurm run --mount` takes it."""
        return f"{self.source}:{self.target}" + (":ro" if self.read_only else "")

    def bind(self) -> str:
        """``SRC:DST:ro|rw``, as Docker's ``HostConfig.Binds`` takes it."""
        return f"{self.source}:{self.target}:{'ro' if self.read_only else 'rw'}"


# File systems whose files give access to devices (directly or via /proc/<pid>/root).
DEVICE_FS = ("devtmpfs", "proc")
_ESCAPE = re.compile(r"\\([0-7]{3})")


def _within(path: str, top: str) -> bool:
    """``path`` is ``top`` or under it (both normalized, absolute)."""
    return path == top or path.startswith(top.rstrip("/") + "/")


def lexical(path: str) -> str:
    """``path`` normalized without touching the file system (``//x/..`` -> ``/``)."""
    return "/" + os.path.normpath("/" + path).lstrip("/")


def path_problem(path: str) -> str | None:
    """Why a bind of the absolute, normalized ``path`` is refused by its name alone."""
    if _within(path, "/dev"):
        return "is a device path"
    if _within("/dev", path):  # only / today
        return (
            f"is {'the root directory' if path == '/' else 'an ancestor of /dev'}, which "
            "contains /dev (a bind mount is recursive, so the container would reach every "
            "device node)"
        )
    if _within(path, "/proc"):
        return (
            "is under /proc (/proc/<pid>/root and /proc/<pid>/fd of host processes link "
            "to the host's /dev)"
        )
    return None


def parse_mountinfo(text: str) -> list[tuple[str, str]]:
    """``(mount point, file system type)`` of each line of ``/proc/<pid>/mountinfo``."""
    out: list[tuple[str, str]] = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 7 or "-" not in fields[6:]:
            continue
        fstype = fields[fields.index("-", 6) + 1 :][:1]
        if not fstype:
            continue
        point = _ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), fields[4])
        out.append((point, fstype[0]))
    return out


def read_mounts() -> list[tuple[str, str]]:
    """This process's mounts; empty where there is no ``/proc/self/mountinfo``."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
            return parse_mountinfo(f.read())
    except OSError:
        return []


def mount_problem(real: str, mounts: Sequence[tuple[str, str]]) -> str | None:
    """Why ``real`` is refused for a device-giving file system on or below it."""
    holder = ""  # the mount point of the file system that holds ``real``
    holder_fs = ""
    for point, fstype in mounts:  # later lines mount over earlier ones
        if _within(real, point) and len(point) >= len(holder):
            holder, holder_fs = point, fstype
    if holder_fs in DEVICE_FS:
        return f"is on a {holder_fs} file system (mounted at {holder!r})"
    for point, fstype in mounts:
        if fstype in DEVICE_FS and point != real and _within(point, real):
            return (
                f"has a {fstype} file system mounted at {point!r} below it (a bind mount "
                "is recursive)"
            )
    return None


def source_problem(real: str, mounts: Sequence[tuple[str, str]] = ()) -> str | None:
    """Why the resolved (``os.path.realpath``) source ``real`` is refused, or None."""
    problem = path_problem(lexical(real))
    if problem:
        return problem
    try:
        mode = os.stat(real).st_mode
    except OSError:
        mode = 0
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "is a device"
    return mount_problem(real, mounts)
