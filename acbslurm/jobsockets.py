"""Where a job's own broker listens, and who may be trusted to listen there.

Each job gets a runtime directory, ``<job_runtime_dir>/<jobid>`` (setting
``job_runtime_dir``, default /run/acbslurm/job), made by the prolog: owned by the job's
user, mode 0700, inside a root-owned parent, the way systemd makes XDG_RUNTIME_DIR.
Nobody else can create, replace or reach a socket in it. (A fixed name in the shared
/tmp, as before, let another user bind the job's broker socket first.) The epilog
removes the directory with everything in it.

Clients check a unix socket before they connect (``check_socket``): the socket and its
directory must belong to them or to root, and the directory must not let others swap
the socket (writable by others only with the sticky bit, as /tmp). Servers (the broker,
the report service) take their socket's path with ``free_socket_path``: refused while a
server listens there, a dead one's socket file removed.
"""

from __future__ import annotations

import os
import stat

from acbslurm.errors import BrokerError

TYPE_CHECKING = False  # a lean-path module: CONTRIBUTING.md, "Lean imports"
if TYPE_CHECKING:
    import socket

BROKER_SOCKET = "broker.sock"


def job_dir(job_id: str, base: str) -> str:
    """The job's runtime directory (``job_id`` checked by the caller: jobrecord.check_job_id)."""
    return os.path.join(base, job_id)


def job_socket_path(job_id: str, base: str) -> str:
    """The per-job broker's gRPC socket."""
    return os.path.join(job_dir(job_id, base), BROKER_SOCKET)


def lane_path(broker_socket: str) -> str:
    """Where the local lane of the broker listening on ``broker_socket`` is."""
    return broker_socket + ".lane"


def create_job_dir(base: str, job_id: str, uid: int, gid: int) -> str:
    """The prolog's part (root): a fresh 0700 directory owned by the job's user."""
    os.makedirs(base, mode=0o755, exist_ok=True)
    st = os.lstat(base)
    if st.st_uid != 0 or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise OSError(f"{base} must be root-owned and writable by root alone")
    path = job_dir(base=base, job_id=job_id)
    remove_job_dir(base, job_id)  # a leftover of a requeued job's earlier run
    os.mkdir(path, 0o700)
    os.chown(path, uid, gid)
    os.chmod(path, 0o700)  # independent of slurmd's umask
    return path


def remove_job_dir(base: str, job_id: str) -> bool:
    """The epilog's part (root): remove the job's directory and all in it; True if it was there.

    The user owns what is inside and may have planted links: ``shutil.rmtree`` never
    follows them (it works through directory descriptors), and a link in the
    directory's own place is unlinked, not followed.
    """
    path = job_dir(job_id=job_id, base=base)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(path)
    elif not _remove_flat_dir(path):
        # Only for a nested directory: shutil imports zlib, bz2 and lzma
        # (docs/benchmarks.md, "Where the client's time went").
        import shutil

        shutil.rmtree(path)
    return True


def _remove_flat_dir(path: str) -> bool:
    """Remove ``path`` when it holds no directory (the broker's socket, lane and state
    files): entries unlinked through the directory's descriptor, opened without
    following a link, so a link planted in its place is never followed. False, with
    the rest left to ``shutil.rmtree``, when it holds a directory."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        with os.scandir(fd) as entries:
            names = []
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    return False
                names.append(entry.name)
        for name in names:
            os.unlink(name, dir_fd=fd)
    finally:
        os.close(fd)
    try:
        os.rmdir(path)
    except OSError:  # something new in it meanwhile (a process of the user still ran)
        return False
    return True


def peer_credentials(conn: socket.socket) -> tuple[int, int, int]:
    """``(pid, uid, gid)`` of the process at the other end of a connected unix socket, as
    the kernel gives them (SO_PEERCRED): nothing the peer sends can change them. The pid
    is 0 when that process is in a pid namespace this one cannot see."""
    import socket
    import struct

    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", creds)
    return int(pid), int(uid), int(gid)


def socket_listening(path: str, timeout: float = 0.5) -> bool:
    """Whether a server listens on the unix socket ``path``: it accepts a connection
    within ``timeout`` seconds, or its backlog is full (EAGAIN: busy, but there). A
    refused connection (a dead server's socket file), none or no socket: False."""
    import socket  # not at import: the hooks import this module

    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(timeout)
        s.connect(path)
        return True
    except (BlockingIOError, TimeoutError):
        return True
    except OSError:
        return False
    finally:
        s.close()


def free_socket_path(path: str) -> bool:
    """Make ``path`` free for a new server's socket: False when a server listens there
    (the caller refuses to start a second one), else True, a dead server's socket removed."""
    if os.path.exists(path):
        if socket_listening(path):
            return False
        os.unlink(path)
    return True


def _may_trust(st: os.stat_result, me: int) -> bool:
    return st.st_uid in (me, 0)


def _directory_trusted(path: str, me: int) -> bool:
    """The socket's directory is ours or root's and only its owner may put files there
    (or it is sticky); False when it does not exist, BrokerError when untrusted."""
    directory = os.path.dirname(path) or "."
    try:
        dst = os.stat(directory)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise BrokerError(f"broker socket directory {directory}: {exc.strerror}") from None
    others_write = dst.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if not _may_trust(dst, me) or (others_write and not dst.st_mode & stat.S_ISVTX):
        raise BrokerError(
            f"permission denied: refusing the broker socket {path}: its directory "
            f"{directory} belongs to uid {dst.st_uid} or others may write it, so anyone "
            "could have put the socket there"
        )
    return True


def check_socket(path: str) -> None:
    """Refuse a unix socket someone else could have put there (BrokerError says who)."""
    me = os.getuid()
    if not _directory_trusted(path, me):
        return  # nothing listens: the caller says so in its own words
    try:
        sst = os.lstat(path)
    except FileNotFoundError:
        return  # nothing listens: the caller says so in its own words
    except OSError as exc:
        raise BrokerError(f"broker socket {path}: {exc.strerror}") from None
    if not stat.S_ISSOCK(sst.st_mode):
        raise BrokerError(f"refusing {path}: not a socket")
    if not _may_trust(sst, me):
        raise BrokerError(
            f"permission denied: the broker socket {path} belongs to uid {sst.st_uid}, "
            "not to you or root (another user's broker)"
        )
    if not os.access(path, os.R_OK | os.W_OK):
        raise BrokerError(f"permission denied: {path} (mode {stat.S_IMODE(sst.st_mode):o})")
