"""Whether a Docker daemon's host network is this node's.

Rootless Docker runs its daemon in rootlesskit's namespaces. Without rootlesskit's
``--detach-netns`` (Docker 20.10 to 28.5 as Debian ships them; the default from Docker
29.5) the daemon lives in rootlesskit's own network namespace, behind slirp4netns or
pasta: ``--network host`` then gives a container that namespace, which no other node
and no process of this node reaches. With ``--detach-netns`` the daemon stays in the
host's network namespace and ``--network host`` is the node's network.

The daemon's process is the peer of its socket (``SO_PEERCRED``: rootlesskit makes no
PID namespace), and two processes share a network namespace when their
``/proc/PID/ns/net`` are one inode (a process of the same user may read the link).
"""

from __future__ import annotations

import os
import socket
import struct

from acbslurm.dockerapi.engine import socket_path
from acbslurm.errors import DockerError

# s: a socket that does not accept at once is a daemon too busy to tell.
CONNECT_TIMEOUT = 2.0


def peer_pid(docker_host: str) -> int | None:
    """The pid of the process that serves ``docker_host``'s socket; None when not told."""
    try:
        path = socket_path(docker_host)
    except DockerError:
        return None
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(CONNECT_TIMEOUT)
        try:
            s.connect(path)
            cred = s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        except OSError:
            return None
    pid = int(struct.unpack("3i", cred)[0])
    return pid if pid > 0 else None


def _net_ns(pid: int | str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def shares_node_network(docker_host: str) -> bool | None:
    """True when the daemon of ``docker_host`` is in this process's network namespace
    (its ``--network host`` is the node's), False when it is in another (rootlesskit's),
    None when it cannot be told (no unix socket, or its process is not readable)."""
    pid = peer_pid(docker_host)
    theirs = _net_ns(pid) if pid is not None else None
    ours = _net_ns("self")
    if theirs is None or ours is None:
        return None
    return theirs == ours
