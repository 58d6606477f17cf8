"""Which network a job's container gets (run_command._network), against daemons'
sockets served by real processes: one in this network namespace (as a daemon with
rootlesskit's --detach-netns), one in a namespace of its own (as one without)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from acbslurm.container import run_command
from acbslurm.container.options import OptionError, RunArgs

SERVE = (
    "import socket, sys\n"
    "s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(8)\n"
    "print('ready', flush=True)\n"
    "while True:\n"
    "    c, _ = s.accept(); c.close()\n"
)


def _daemon(path: Path, own_netns: bool) -> subprocess.Popen[str]:
    argv = [sys.executable, "-c", SERVE, str(path)]
    if own_netns:
        argv = ["unshare", "--net", "--", *argv]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    return p


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[dict[str, str]]:
    if os.geteuid() != 0:
        pytest.skip("a network namespace of its own needs root here")
    procs = {"node": _daemon(tmp_path / "node.sock", False)}
    procs["own"] = _daemon(tmp_path / "own.sock", True)
    yield {k: f"unix://{tmp_path}/{k}.sock" for k in procs}
    for p in procs.values():
        p.kill()
        p.wait()
        if p.stdout is not None:
            p.stdout.close()


def test_a_step_on_several_nodes_gets_the_nodes_network_where_the_daemon_has_it(
    daemons: dict[str, str], monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SLURM_STEP_NUM_NODES", "2")
    monkeypatch.setenv("SLURM_PROCID", "0")
    plain = RunArgs(image="img")
    assert run_command._network(plain, daemons["node"]) == "host"
    # -p and --hostname keep Docker's network: the host network has no use for them
    assert run_command._network(RunArgs(image="img", publish=("8888",)), daemons["node"]) is None
    assert run_command._network(plain, daemons["own"]) is None
    err = capfd.readouterr().err
    assert err.count("this step spans 2 nodes, but its containers cannot reach each other") == 1
    monkeypatch.setenv("SLURM_PROCID", "1")  # only rank 0 says it
    assert run_command._network(plain, daemons["own"]) is None
    assert "spans" not in capfd.readouterr().err
    monkeypatch.setenv("SLURM_STEP_NUM_NODES", "1")
    assert run_command._network(plain, daemons["node"]) is None  # one node: Docker's


def test_host_is_refused_where_it_is_not_the_nodes(
    daemons: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_STEP_NUM_NODES", "1")
    host = RunArgs(image="img", network="host")
    assert run_command._network(host, daemons["node"]) == "host"
    with pytest.raises(OptionError, match="--network host: this node's Docker daemon runs"):
        run_command._network(host, daemons["own"])
    assert run_command._network(RunArgs(image="img", network="none"), daemons["own"]) == "none"
