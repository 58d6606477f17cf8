"""The epilog removes a job's leftover broker sockets, and nothing planted in their place."""

import os
import socket
from pathlib import Path

from acbslurm.broker.address import job_socket
from acbslurm.hooks.broker_sockets import job_broker_sockets, remove_broker_sockets


def bound_socket(path: str) -> None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.bind(path)
    s.close()  # the file stays, as after a broker killed with SIGKILL


def test_the_names_are_the_brokers() -> None:
    assert job_broker_sockets("12") == [
        job_socket("12")[len("unix:") :],
        job_socket("12")[5:] + ".lane",
    ]


def test_removes_the_jobs_sockets_only(tmp_path: Path) -> None:
    sock, lane = job_broker_sockets("7", str(tmp_path))
    bound_socket(sock)
    bound_socket(lane)
    other = job_broker_sockets("8", str(tmp_path))[0]
    bound_socket(other)
    assert remove_broker_sockets("7", os.getuid(), str(tmp_path)) == [sock, lane]
    assert not os.path.exists(sock) and not os.path.exists(lane)
    assert os.path.exists(other)  # another job's
    assert remove_broker_sockets("7", os.getuid(), str(tmp_path)) == []  # nothing left: fine


def test_leaves_planted_files_links_and_other_owners_alone(tmp_path: Path) -> None:
    sock, lane = job_broker_sockets("9", str(tmp_path))
    target = tmp_path / "precious"
    target.write_text("x")
    os.symlink(target, sock)  # a link where the socket would be
    Path(lane).write_text("not a socket")
    assert remove_broker_sockets("9", os.getuid(), str(tmp_path)) == []
    assert os.path.islink(sock) and target.read_text() == "x" and os.path.exists(lane)
    os.unlink(sock)
    bound_socket(sock)
    assert remove_broker_sockets("9", os.getuid() + 4242, str(tmp_path)) == []  # not theirs
    assert os.path.exists(sock)
