"""The job's cgroup helper: a root process per job that puts the job's containers into
the job's cgroups, one request at a time.

Only root can move a process into Slurm's cgroups, and the container's processes are
children of the user's Docker daemon, not of the job. So the prolog makes the helper's
directory and starts the helper (``start``), detached from slurmd, listening on
``cgroup.sock`` there; the epilog ends it and removes the directory (``stop``), and it
ends by itself when its socket goes. Each request is one JSON line
(``{"run_pid": N, "container_pid": M}``, or ``{"run_pid": N, "exec": true}`` from the
runtime of a ``docker exec``, which is moved itself) answered by one JSON line
(``{"ok": true, "files": [...]}`` or ``{"ok": false, "error": "..."}``); ``join.py``
checks who asks and what is moved.

The directory is ``<job_runtime_dir>/<jobid>.cgroup``: root's (0755) in root's
``job_runtime_dir``, not the user's own job directory. Root binds the socket there and
hands it to the user (chown, 0600: nobody else can connect). In a directory the user
owns, the user could rename a link to a root file in at the socket's name between the
bind and the chown, and root would give that file away (issue 39). So every name root
binds, hands over or removes is reached through a descriptor of a directory checked to
be root's (opened without following a link), and the chown never follows one.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import socket
import stat
import struct
import sys
import threading
import time

from acbslurm.cgroups.names import HELPER_DIR_SUFFIX, HELPER_SOCKET
from acbslurm.errors import AcbslurmError
from acbslurm.procfs import start_time
from acbslurm.units import is_ascii_int

# s a caller has to send its request: the runtime connects when runc begins to create
# the container and sends it when runc is done (a create took seconds in a burst of
# 128 starts in one daemon).
REQUEST_TIMEOUT = 60.0
REQUEST_LIMIT = 4096
# While a caller's request has not come: every WARM_EVERY s, for at most WARM_FOR s, a
# move of this helper into its own cgroup (a move that changes nothing). The kernel's
# first move after a quiet spell waits for an RCU grace period (the moves right after it
# do not: docs/benchmarks.md, "Hooks and `acbslurm run`"), and keeps its fast path only
# about a grace period after the last move. So the container's move, when its request
# comes, does not wait for it.
WARM_EVERY = 0.003
WARM_FOR = 3.0
# Requests answered at once (a job's tasks start their containers together); more
# wait for the accept loop.
MAX_AT_ONCE = 32
# s between checks that the helper's socket (and so the job) is still there.
POLL = 1.0
# A directory opened only as itself: a link in its place fails (ELOOP), never followed.
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def helper_dir(runtime_dir: str, job_id: str) -> str:
    """The helper's directory (``job_id`` checked by the caller: jobrecord.check_job_id)."""
    return os.path.join(runtime_dir, job_id + HELPER_DIR_SUFFIX)


def socket_path(runtime_dir: str, job_id: str) -> str:
    return os.path.join(helper_dir(runtime_dir, job_id), HELPER_SOCKET)


def pid_file(record_dir: str, job_id: str) -> str:
    """Root's note of the helper's pid (in the root-owned record directory, not the
    user's job directory: the epilog signals what it names)."""
    return os.path.join(record_dir, f"{job_id}.cgroup-helper")


def _say(msg: str) -> None:
    import syslog  # the helper daemon's: the hooks import this module

    syslog.openlog("acbslurm-cgroup-helper", syslog.LOG_PID, syslog.LOG_DAEMON)
    with contextlib.suppress(OSError, ValueError):
        syslog.syslog(syslog.LOG_INFO, msg)


def _open_own_dir(name: str, path: str, dir_fd: int | None = None) -> int:
    """A descriptor of the directory ``name`` (in ``dir_fd``), opened without following a
    link, once it is this process's (root's) and writable by it alone: nobody else can
    have put anything in it, nor rename anything there. OSError naming ``path`` else."""
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        raise _refused(path, "a link or not a directory") from None
    st = os.fstat(fd)
    if st.st_uid != os.geteuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        os.close(fd)
        raise _refused(path, f"uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):o}")
    return fd


def _refused(path: str, what: str) -> OSError:
    return OSError(
        f"{path} ({what}) is not a directory of root's alone: refused, the job's cgroup "
        "helper does not use it"
    )


def make_dir(runtime_dir: str, job_id: str) -> None:
    """The prolog's part: the helper's directory, fresh (an earlier run's, of a requeued
    job, removed: its helper stops), root's, 0755 (the user reaches the socket in it)."""
    base = _open_own_dir(runtime_dir, runtime_dir)
    try:
        name = job_id + HELPER_DIR_SUFFIX
        _remove_in(base, name, helper_dir(runtime_dir, job_id))
        os.mkdir(name, 0o700, dir_fd=base)
        fd = _open_own_dir(name, helper_dir(runtime_dir, job_id), base)
        try:
            os.fchmod(fd, 0o755)  # independent of slurmd's umask
        finally:
            os.close(fd)
    finally:
        os.close(base)


def remove_dir(runtime_dir: str, job_id: str) -> bool:
    """The epilog's part: the helper's directory and its socket; True if it was there."""
    try:
        base = _open_own_dir(runtime_dir, runtime_dir)
    except FileNotFoundError:
        return False
    try:
        return _remove_in(base, job_id + HELPER_DIR_SUFFIX, helper_dir(runtime_dir, job_id))
    finally:
        os.close(base)


def _remove_in(base: int, name: str, path: str) -> bool:
    """Remove the helper's directory ``name`` in ``base`` and what is in it (the socket),
    through its descriptor; refused (OSError) when it is not root's alone."""
    try:
        fd = _open_own_dir(name, path, base)
    except FileNotFoundError:
        return False
    try:
        for entry in os.listdir(fd):
            os.unlink(entry, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=base)
    return True


def _bind(dir_fd: int, uid: int, gid: int) -> tuple[socket.socket, int]:
    """The helper's socket, bound in its directory (``dir_fd``) and handed to the job's
    user with mode 0600; and its inode, for the stop rule."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(HELPER_SOCKET, dir_fd=dir_fd)  # an earlier helper's of this run
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        old = os.umask(0o177)
        try:
            # bind(2) takes a path, not a directory descriptor: this one goes through the
            # descriptor, so the socket is made in the directory checked.
            sock.bind(f"/proc/self/fd/{dir_fd}/{HELPER_SOCKET}")
        finally:
            os.umask(old)
        # Never through a link: root would hand the link's target to the user.
        os.chown(HELPER_SOCKET, uid, gid, dir_fd=dir_fd, follow_symlinks=False)
        st = os.stat(HELPER_SOCKET, dir_fd=dir_fd, follow_symlinks=False)
        if not stat.S_ISSOCK(st.st_mode) or st.st_uid != uid:
            raise OSError(f"{HELPER_SOCKET} was replaced while it was bound: refused")
        sock.listen(8)
        sock.settimeout(POLL)
        return sock, st.st_ino
    except BaseException:
        sock.close()
        raise


def _still_there(dir_fd: int, ident: int) -> bool:
    """Is the helper's socket still the one bound? No once the epilog removed the
    directory, or a requeued run's prolog made it anew."""
    try:
        return os.stat(HELPER_SOCKET, dir_fd=dir_fd, follow_symlinks=False).st_ino == ident
    except FileNotFoundError:
        return False


class Warmer:
    """Moves this helper into the cgroup it is in (``warm``), which gets the kernel's
    move path ready (WARM_EVERY). Quietly does nothing where that cannot be done."""

    def __init__(self) -> None:
        # the helper daemon's: the hooks import this module
        from acbslurm.cgroups.membership import memberships, mount_points, procs_file

        mounts = mount_points()
        found = (procs_file(mounts, m) for m in memberships(os.getpid()))
        self.path = next((p for p in found if p), None)
        self.pid = str(os.getpid()).encode()
        self.last = 0.0

    def warm(self) -> None:
        """One move, unless another caller's wait made one just now (many callers
        waiting at once warm no more often than one)."""
        now = time.monotonic()
        if self.path is None or now - self.last < WARM_EVERY / 2:
            return
        self.last = now
        try:
            fd = os.open(self.path, os.O_WRONLY)
            try:
                os.write(fd, self.pid)
            finally:
                os.close(fd)
        except OSError:
            self.path = None


# complexity: one read loop; each turn checks the request's size and deadline, and
# warms the move while nothing has come.
def _receive(conn: socket.socket, warmer: Warmer | None) -> bytes:
    """The caller's bytes up to its first newline (or its close), warming the move while
    nothing has come yet (for at most WARM_FOR s)."""
    data = b""
    start = time.monotonic()
    warm_until = start + WARM_FOR if warmer is not None else start
    while b"\n" not in data:
        left = start + REQUEST_TIMEOUT - time.monotonic()
        if len(data) > REQUEST_LIMIT or left <= 0:
            raise ValueError("request too long or too slow")
        warming = not data and time.monotonic() < warm_until
        chunk = _chunk(conn, min(left, WARM_EVERY) if warming else left)
        if chunk is None:  # nothing within the timeout
            if warming and warmer is not None:
                warmer.warm()
            continue
        if not chunk:
            break
        data += chunk
    return data


def _chunk(conn: socket.socket, timeout: float) -> bytes | None:
    conn.settimeout(timeout)
    try:
        return conn.recv(REQUEST_LIMIT)
    except TimeoutError:
        return None


def _read_request(conn: socket.socket, warmer: Warmer | None = None) -> dict[str, object]:
    data = _receive(conn, warmer)
    conn.settimeout(REQUEST_TIMEOUT)  # for the answer
    if not data:
        raise Unasked
    try:
        req = json.loads(data.split(b"\n", 1)[0])
    except RecursionError:  # 4 KiB of "[": bad JSON like any other
        raise ValueError("a request nested too deeply") from None
    if not isinstance(req, dict):
        raise ValueError("a request is a JSON object")
    return req


def _pid_of(req: dict[str, object], key: str) -> int:
    value = req.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 < value < 2**22 + 1:
        raise ValueError(f"{key} must be a process id, got {value!r}")
    return value


class Unasked(Exception):
    """A caller closed its connection without a request: its runc failed to create the
    container (Docker says why), so there is nothing to move and nothing to log."""


def answer(
    conn: socket.socket, job_id: str, job_uid: int, warmer: Warmer | None = None
) -> dict[str, object]:
    """One request on ``conn``: its answer (also sent)."""
    from acbslurm.cgroups.join import join, join_asker  # imported at the helper's start

    try:
        # The process that connected, as the kernel saw it: (pid, uid, gid).
        raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        peer_pid, peer, _ = struct.unpack("3i", raw)
        req = _read_request(conn, warmer)
        run_pid = _pid_of(req, "run_pid")
        if req.get("exec") is True:
            # An exec's runtime asks for itself: the pid is the kernel's, not the request's.
            done = join_asker(job_id, job_uid, peer, peer_pid, run_pid)
            what = f"the runtime of an exec, process {peer_pid},"
        else:
            container_pid = _pid_of(req, "container_pid")
            done = join(job_id, job_uid, peer, run_pid, container_pid)
            what = f"container process {container_pid}"
        reply: dict[str, object] = {"ok": True, "files": list(done.files)}
        _say(f"job {job_id}: {what} joined the cgroups of {run_pid}")
    except Unasked:
        return {"ok": False, "error": "no request"}
    except (AcbslurmError, ValueError, OSError) as exc:
        reply = {"ok": False, "error": str(exc)}
        _say(f"job {job_id}: {exc}")
    with contextlib.suppress(OSError):
        conn.sendall(json.dumps(reply).encode() + b"\n")
    return reply


def serve(job_id: str, job_uid: int, job_gid: int, runtime_dir: str) -> int:
    """Answer requests until the helper's socket goes (the epilog) or SIGTERM."""
    base = _open_own_dir(runtime_dir, runtime_dir)
    try:
        dir_fd = _open_own_dir(job_id + HELPER_DIR_SUFFIX, helper_dir(runtime_dir, job_id), base)
    finally:
        os.close(base)
    slots = threading.BoundedSemaphore(MAX_AT_ONCE)

    def one(conn: socket.socket, warmer: Warmer) -> None:
        try:
            with conn:
                answer(conn, job_id, job_uid, warmer)
        finally:
            slots.release()

    try:
        sock, ident = _bind(dir_fd, job_uid, job_gid)
        with sock:
            import acbslurm.cgroups.join  # noqa: F401 - now, not on the first container's start

            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
            warmer = Warmer()
            while True:
                try:
                    conn, _ = sock.accept()
                except TimeoutError:
                    if not _still_there(dir_fd, ident):
                        return 0
                    continue
                # A request comes only once runc has created its container: answer
                # each in a thread of its own, so that a job's containers start side
                # by side.
                slots.acquire()
                threading.Thread(target=one, args=(conn, warmer), daemon=True).start()
    finally:
        os.close(dir_fd)


def start(record_dir: str, job_id: str, job_uid: int, job_gid: int, runtime_dir: str) -> int:
    """The prolog's part: the helper's directory, and the helper, detached (its own
    session, no descriptor of slurmd's), its pid noted for the epilog; returns the pid.
    The prolog does not wait for it: a request that comes before it listens is retried
    (``runtime.py``)."""
    import subprocess  # the prolog's start alone: the epilog imports this module too

    make_dir(runtime_dir, job_id)
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONPATH": package_root}
    argv = [sys.executable, "-s", "-m", "acbslurm.cgroups.helper"]
    argv += [job_id, str(job_uid), str(job_gid), runtime_dir]
    child = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
        env=env,
        cwd="/",
    )
    path = pid_file(record_dir, job_id)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"{child.pid} {start_time(child.pid)}\n")
    return child.pid


def stop(record_dir: str, job_id: str, runtime_dir: str) -> bool:
    """The epilog's part: end the job's helper if it runs (the pid file names it, with
    its start time: a reused pid is left alone), and remove its directory (whether or
    not a helper ran). True when one was signalled."""
    path = pid_file(record_dir, job_id)
    signalled = False
    try:
        with open(path) as f:
            pid_text, _, born = f.read().strip().partition(" ")
    except FileNotFoundError:
        pid_text = born = ""
    if is_ascii_int(pid_text) and born and start_time(int(pid_text)) == born:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid_text), signal.SIGTERM)
            signalled = True
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    remove_dir(runtime_dir, job_id)
    return signalled


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    job_id, uid, gid, runtime_dir = args[0], int(args[1]), int(args[2]), args[3]
    try:
        return serve(job_id, uid, gid, runtime_dir)
    except OSError as exc:
        _say(f"job {job_id}: the cgroup helper stops: {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
