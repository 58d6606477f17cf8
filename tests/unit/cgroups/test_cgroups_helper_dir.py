"""The helper's socket where the job's user cannot rename (issue 39), and the join's
pid checks around the move.

The helper binds its socket and hands it to the job's user as root: in its own
directory, root's, reached through a descriptor, and never through a link. The tests
that hand the socket to another uid, or race root as the user would, need root.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import stat
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from acbslurm.cgroups import helper, join
from acbslurm.cgroups.membership import Membership, memberships, mount_points, procs_file
from acbslurm.cgroups.names import HELPER_SOCKET
from acbslurm.errors import CgroupJoinError
from acbslurm.procfs import start_time

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
NOBODY = 65534
RENAME_EXCHANGE = 2
AT_FDCWD = -100


@pytest.fixture
def target(tmp_path: Path) -> Path:
    """A file root keeps for itself (as /etc/shadow)."""
    secret = tmp_path / "secret"
    secret.write_text("root's alone\n")
    secret.chmod(0o600)
    return secret


@pytest.fixture
def base(tmp_path: Path) -> Path:
    """A job runtime directory, root's (this process's) alone."""
    runtime = tmp_path / "job"
    runtime.mkdir(0o755)
    return runtime


@pytest.fixture
def dir_fd(base: Path) -> Iterator[int]:
    helper.make_dir(str(base), "7")
    fd = os.open(helper.helper_dir(str(base), "7"), os.O_RDONLY | os.O_DIRECTORY)
    yield fd
    os.close(fd)


def untouched(path: Path) -> bool:
    st = path.stat()
    return (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o600)


def test_the_prolog_makes_the_helpers_directory_roots_beside_the_jobs(base: Path) -> None:
    helper.make_dir(str(base), "7")
    st = os.lstat(base / "7.cgroup")
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o755
    assert st.st_uid == os.geteuid()
    assert helper.socket_path(str(base), "7") == f"{base}/7.cgroup/{HELPER_SOCKET}"
    # A requeued run's prolog makes it anew: the earlier run's socket goes with it.
    (base / "7.cgroup" / HELPER_SOCKET).write_text("")
    helper.make_dir(str(base), "7")
    assert os.listdir(base / "7.cgroup") == []
    assert helper.remove_dir(str(base), "7") is True
    assert not (base / "7.cgroup").exists()
    assert helper.remove_dir(str(base), "7") is False


def test_acbslurm_run_names_the_socket_the_helper_binds() -> None:
    from acbslurm.container.run_command import _cgroup_socket

    assert _cgroup_socket("join", "/run/j", "12_3") == helper.socket_path("/run/j", "12_3")
    assert _cgroup_socket("off", "/run/j", "12") == ""
    assert _cgroup_socket("join", "/run/j", None) == ""


def test_what_is_at_the_helpers_directory_unless_roots_alone_is_refused(
    base: Path, target: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep").write_text("")
    (base / "7.cgroup").symlink_to(elsewhere)
    for step in (helper.make_dir, helper.remove_dir):
        with pytest.raises(OSError, match=r"7\.cgroup \(a link or not a directory\).*refused"):
            step(str(base), "7")
    assert (base / "7.cgroup").is_symlink() and os.listdir(elsewhere) == ["keep"]
    (base / "7.cgroup").unlink()
    (base / "7.cgroup").mkdir(0o777)
    os.chmod(base / "7.cgroup", 0o777)  # others could put a link in it
    with pytest.raises(OSError, match=r"mode 777\).*refused"):
        helper.make_dir(str(base), "7")
    with pytest.raises(OSError, match=r"mode 777\).*refused"):
        helper.serve("7", os.getuid(), os.getgid(), str(base))
    os.rmdir(base / "7.cgroup")
    os.chmod(base, 0o775)  # the runtime directory itself: root's alone too
    with pytest.raises(OSError, match=r"job \(uid \d+, mode 775\).*refused"):
        helper.make_dir(str(base), "7")


@as_root
def test_a_directory_of_the_users_at_the_helpers_place_is_refused(base: Path) -> None:
    (base / "7.cgroup").mkdir(0o755)
    os.chown(base / "7.cgroup", NOBODY, NOBODY)
    with pytest.raises(OSError, match=rf"uid {NOBODY}, mode 755\).*refused"):
        helper.make_dir(str(base), "7")
    with pytest.raises(OSError, match="refused"):
        helper.serve("7", NOBODY, NOBODY, str(base))


@as_root
def test_the_socket_is_bound_in_its_directory_and_handed_to_the_user(dir_fd: int) -> None:
    sock, ident = helper._bind(dir_fd, NOBODY, NOBODY)
    with sock:
        st = os.stat(HELPER_SOCKET, dir_fd=dir_fd, follow_symlinks=False)
        assert stat.S_ISSOCK(st.st_mode) and st.st_ino == ident
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (NOBODY, NOBODY, 0o600)
        assert helper._still_there(dir_fd, ident)
    os.unlink(HELPER_SOCKET, dir_fd=dir_fd)
    assert not helper._still_there(dir_fd, ident)


@as_root
@pytest.mark.parametrize("planted", ["symlink", "hard link"])
def test_a_link_planted_at_the_sockets_name_is_replaced_never_followed(
    dir_fd: int, target: Path, planted: str
) -> None:
    if planted == "symlink":
        os.symlink(target, HELPER_SOCKET, dir_fd=dir_fd)
    else:  # a regular file at the name: root's own file, linked there
        os.link(target, HELPER_SOCKET, dst_dir_fd=dir_fd)
    sock, _ = helper._bind(dir_fd, NOBODY, NOBODY)
    sock.close()
    st = os.stat(HELPER_SOCKET, dir_fd=dir_fd, follow_symlinks=False)
    assert stat.S_ISSOCK(st.st_mode) and st.st_uid == NOBODY
    assert untouched(target)


def _renameat2() -> Callable[[int, bytes, int, bytes, int], int]:
    fn = ctypes.CDLL(None, use_errno=True).renameat2
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return fn


@as_root
def test_a_racer_swapping_a_link_in_at_the_socket_never_gets_roots_file(
    base: Path, dir_fd: int, target: Path
) -> None:
    """The attack of issue 39, with root's rights (in the helper's directory only root
    can rename): a thread swaps a link to ``target`` with the socket's name
    (renameat2 RENAME_EXCHANGE), planting it again whenever it went, while the helper
    binds and hands over its socket again and again. Each bind that meets the link is
    refused; the file stays root's."""
    renameat2 = _renameat2()
    where = Path(helper.helper_dir(str(base), "7"))
    link, name = bytes(where / ".x"), bytes(where / HELPER_SOCKET)
    stop = threading.Event()
    swaps = [0]

    def race() -> None:
        while not stop.is_set():
            if not os.path.islink(link):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(link)
                os.symlink(target, link)
            if renameat2(AT_FDCWD, link, AT_FDCWD, name, RENAME_EXCHANGE) == 0:
                swaps[0] += 1

    racer = threading.Thread(target=race, daemon=True)
    racer.start()
    refused = 0
    try:
        for _ in range(2000):
            try:
                sock, _ = helper._bind(dir_fd, NOBODY, NOBODY)
                sock.close()
            except OSError:  # the link met, or the name taken meanwhile
                refused += 1
    finally:
        stop.set()
        racer.join(5)
    assert swaps[0] > 0 and refused > 0, (swaps, refused)  # the race was run
    assert untouched(target)


def test_the_helper_stops_when_the_epilog_removes_its_directory(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(helper, "POLL", 0.05)
    helper.make_dir(str(base), "7")
    done: list[int] = []
    t = threading.Thread(
        target=lambda: done.append(helper.serve("7", os.getuid(), os.getgid(), str(base))),
        daemon=True,
    )
    t.start()
    path = helper.socket_path(str(base), "7")
    for _ in range(500):
        if os.path.exists(path):
            break
        t.join(0.01)
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(path)  # it listens
    assert helper.stop(str(base), "7", str(base)) is False  # no pid file: nothing signalled
    assert not os.path.lexists(helper.helper_dir(str(base), "7"))
    t.join(5)
    assert done == [0]


# -- the join: the process moved is the one checked -------------------------------------


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    p = subprocess.Popen(["sleep", "60"])
    yield p
    p.kill()
    p.wait()


def _goal_beside(pid: int) -> list[Membership]:
    """A made-up job cgroup in each mounted hierarchy ``pid`` is in (nothing is written
    to it)."""
    mounts = mount_points()
    return [
        Membership(m.hierarchy, m.controllers, "/job_7/step_0")
        for m in memberships(pid)
        if procs_file(mounts, m)
    ]


def _recorded(monkeypatch: pytest.MonkeyPatch, during: object = None) -> list[tuple[str, int]]:
    """The writes to cgroup.procs, recorded instead of made; ``during()`` runs at the first."""
    writes: list[tuple[str, int]] = []

    def write(path: str, pid: int) -> None:
        if not writes and callable(during):
            during()
        writes.append((path, pid))

    monkeypatch.setattr(join, "_write_pid", write)
    return writes


def test_a_pid_reused_before_the_move_is_refused_with_nothing_moved(
    child: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process checked (held by a pidfd) ended, and its pid names another by the
    move: refused before any write."""
    gone = subprocess.Popen(["true"])
    pidfd = os.pidfd_open(gone.pid)
    gone.wait()
    writes = _recorded(monkeypatch)
    try:
        with pytest.raises(CgroupJoinError, match="ended before it was moved"):
            born = start_time(child.pid)
            join._move(pidfd, child.pid, born, _goal_beside(child.pid))
        with pytest.raises(CgroupJoinError, match="replaced before it was moved"):
            still = os.pidfd_open(child.pid)
            try:
                join._move(still, child.pid, "1", _goal_beside(child.pid))
            finally:
                os.close(still)
    finally:
        os.close(pidfd)
    assert writes == []


def test_a_pid_reused_during_the_move_is_moved_back_where_it_was(
    child: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process checked ends as the move is made, its pid taken by another (here
    ``child``, which passed the check before the move): after the move the pidfd names
    no process, so what has the pid goes back to the cgroups it was in."""
    checked = subprocess.Popen(["sleep", "60"])
    pidfd = os.pidfd_open(checked.pid)

    def ends() -> None:
        checked.send_signal(signal.SIGKILL)
        checked.wait()

    writes = _recorded(monkeypatch, ends)
    goal = _goal_beside(child.pid)
    mounts = mount_points()
    try:
        with pytest.raises(CgroupJoinError, match="ended while it was moved"):
            join._move(pidfd, child.pid, start_time(child.pid), goal)
    finally:
        os.close(pidfd)
    there = [procs_file(mounts, m) for m in memberships(child.pid) if procs_file(mounts, m)]
    moved = [(procs_file(mounts, m), child.pid) for m in goal]
    assert writes == moved + [(p, child.pid) for p in there]


def test_a_failed_write_moves_back_what_was_moved(
    child: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One hierarchy refuses (a cgroup gone meanwhile): the process leaves the ones it
    entered, so it is in no job's cgroup at all, never in part of one."""
    writes: list[tuple[str, int]] = []
    goal = _goal_beside(child.pid)

    def write(path: str, pid: int) -> None:
        writes.append((path, pid))
        if len(writes) == 2:
            raise CgroupJoinError(f"cannot move process {pid} into {path}: No such file")

    monkeypatch.setattr(join, "_write_pid", write)
    pidfd = os.pidfd_open(child.pid)
    try:
        with pytest.raises(CgroupJoinError, match="cannot move"):
            join._move(pidfd, child.pid, start_time(child.pid), [goal[0], goal[0]])
    finally:
        os.close(pidfd)
    mounts = mount_points()
    back = next(m for m in memberships(child.pid) if m.hierarchy == goal[0].hierarchy)
    assert writes[2:] == [(procs_file(mounts, back), child.pid)]
