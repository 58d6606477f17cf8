"""Per-job runtime directories and the check clients make before using a broker socket."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from acbslurm.errors import BrokerError
from acbslurm.jobsockets import (
    check_socket,
    create_job_dir,
    free_socket_path,
    job_socket_path,
    remove_job_dir,
    socket_listening,
)


def _bound(path: Path) -> Path:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.close()
    return path


def test_own_and_roots_sockets_are_trusted(tmp_path: Path) -> None:
    check_socket(str(_bound(tmp_path / "b.sock")))
    check_socket(str(tmp_path / "missing.sock"))  # nothing there: the caller says so
    check_socket("/nonexistent/dir/b.sock")


def test_another_users_socket_is_refused(tmp_path: Path) -> None:
    sock = _bound(tmp_path / "b.sock")
    os.chown(sock, 4242, 4242)
    with pytest.raises(BrokerError, match=r"permission denied: the broker socket .* uid 4242"):
        check_socket(str(sock))


def test_a_socket_in_a_directory_others_may_write_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    sock = _bound(shared / "b.sock")
    shared.chmod(0o777)
    with pytest.raises(BrokerError, match="permission denied: refusing"):
        check_socket(str(sock))
    shared.chmod(0o1777)  # sticky, as /tmp: nobody else can replace our socket
    check_socket(str(sock))
    os.chown(shared, 4242, 4242)
    with pytest.raises(BrokerError, match="belongs to uid 4242"):
        check_socket(str(sock))


def test_job_dir_is_private_and_removed_whole(tmp_path: Path) -> None:
    base = str(tmp_path / "job")
    path = create_job_dir(base, "12", 4242, 4243)
    st = os.stat(path)
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (4242, 4243, 0o700)
    assert job_socket_path("12", base) == f"{path}/broker.sock"
    _bound(Path(job_socket_path("12", base)))
    assert remove_job_dir(base, "12") and not os.path.exists(path)
    assert not remove_job_dir(base, "12")


def test_job_dir_removal_follows_no_link_and_takes_nested_dirs(tmp_path: Path) -> None:
    """What the user planted: a link to a file and one to a directory outside (both stay
    whole), and a nested directory (removed too, by shutil's fd-based rmtree)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x")
    base = str(tmp_path / "job")
    for job, nested in (("13", False), ("14", True)):
        path = Path(create_job_dir(base, job, os.getuid(), os.getgid()))
        (path / "file-link").symlink_to(outside / "keep")
        (path / "dir-link").symlink_to(outside)
        (path / "plain").write_text("y")
        if nested:
            (path / "sub" / "deeper").mkdir(parents=True)
            (path / "sub" / "deeper" / "link").symlink_to(outside)
        assert remove_job_dir(base, job) and not path.exists()
    assert (outside / "keep").read_text() == "x"


def test_job_dir_needs_a_root_owned_parent(tmp_path: Path) -> None:
    base = tmp_path / "job"
    base.mkdir(mode=0o777)
    base.chmod(0o777)
    with pytest.raises(OSError, match="root-owned and writable by root alone"):
        create_job_dir(str(base), "12", 4242, 4242)


def test_a_live_servers_socket_is_kept_a_dead_ones_removed(tmp_path: Path) -> None:
    """What the broker and the report service do before they bind their socket."""
    path = tmp_path / "s.sock"
    assert free_socket_path(str(path)) and not path.exists()  # nothing there
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)  # and never accepts: a busy server
    try:
        for _ in range(4):  # past the backlog: connect answers EAGAIN, the server is there
            assert socket_listening(str(path))
            assert not free_socket_path(str(path)) and path.exists()
    finally:
        server.close()  # the socket file stays, as after a server killed hard
    assert path.exists() and not socket_listening(str(path))
    assert free_socket_path(str(path)) and not path.exists()
