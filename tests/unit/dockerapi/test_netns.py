"""Whether a daemon's host network is the node's: the socket's peer process and its
network namespace, against real processes (one in a network namespace of its own, as
rootlesskit's daemon is)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from acbslurm.dockerapi.netns import peer_pid, shares_node_network

SERVE = (
    "import socket, sys, time\n"
    "s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(4)\n"
    "print('ready', flush=True)\n"
    "while True:\n"
    "    c, _ = s.accept(); c.close()\n"
)


def test_a_daemon_of_this_namespace_shares_the_nodes_network(tmp_path: Path) -> None:
    path = tmp_path / "d.sock"
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(str(path))
    srv.listen(4)
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:  # closed by the test's end
                return
            conn.close()

    threading.Thread(target=accept, daemon=True).start()
    try:
        assert peer_pid(f"unix://{path}") == os.getpid()
        assert shares_node_network(f"unix://{path}") is True
    finally:
        stop.set()
        srv.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="a network namespace of its own needs root here")
def test_a_daemon_in_a_namespace_of_its_own_does_not(tmp_path: Path) -> None:
    """As rootlesskit's daemon without --detach-netns: its host network is not ours."""
    path = tmp_path / "d.sock"
    p = subprocess.Popen(
        ["unshare", "--net", "--", sys.executable, "-c", SERVE, str(path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        assert peer_pid(f"unix://{path}") == p.pid  # unshare execs the server
        assert shares_node_network(f"unix://{path}") is False
    finally:
        p.kill()
        p.wait()
        if p.stdout is not None:
            p.stdout.close()


def test_what_cannot_be_told_is_none(tmp_path: Path) -> None:
    assert shares_node_network("tcp://10.0.0.1:2375") is None
    assert shares_node_network(f"unix://{tmp_path}/nobody.sock") is None
