"""The node networks' names, addresses, configuration and commands (sandbox/nodenet.py),
without starting anything; tests/integration/test_node_network_sandbox.py runs them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from acbslurm.errors import SetupError
from acbslurm.gpu.inventory import GpuInfo, sandbox_uuid
from acbslurm.sandbox import nodenet, render
from acbslurm.sandbox.cluster import _same_network, _with_network
from acbslurm.sandbox.layout import Layout, Params


def _gpus(lay: Layout, p: Params) -> dict[str, list[GpuInfo]]:
    return {
        n: [GpuInfo(0, k, sandbox_uuid(str(lay.root), k), device=f"{lay.dev}/nvidia{k}")]
        for k, n in enumerate(p.node_names)
    }


def _net(port_base: int = 22817, nodes: int = 2) -> Params:
    return Params(nodes=nodes, node="login", port_base=port_base, node_network=True)


def test_each_node_has_its_own_address_and_the_machine_the_gateway() -> None:
    p = _net(nodes=3)
    assert nodenet.subnet(p) == "10.100.228"
    assert [nodenet.node_addr(p, n) for n in p.node_names] == [
        "10.100.228.1",
        "10.100.228.2",
        "10.100.228.3",
    ]
    assert nodenet.gateway(p) == nodenet.controller_addr(p) == "10.100.228.254"
    # Without node networks everything stays on 127.0.0.1.
    plain = Params(nodes=2, node="login", port_base=22817)
    assert (
        nodenet.controller_addr(plain) == nodenet.slurm_node_addr(plain, "login-2") == "127.0.0.1"
    )


def test_sandboxes_100_ports_apart_get_subnets_and_names_apart() -> None:
    seen: dict[str, int] = {}
    for base in range(10000, 65001, 100):
        p = _net(base)
        key = nodenet.subnet(p)
        assert key not in seen, (base, seen.get(key))
        seen[key] = base
        names = [nodenet.bridge(p), *(nodenet._veth(p, n) + "p" for n in p.node_names)]
        # Linux interface names hold 15 bytes.
        assert all(len(n) <= 15 for n in names), names
        octets = [int(x) for x in key.split(".")]
        assert octets[0] == 10 and all(0 <= x <= 255 for x in octets)


def test_every_node_resolves_every_node_and_the_controller() -> None:
    p = _net()
    lines = [ln.split() for ln in nodenet.hosts_text(p).splitlines()]
    assert ["127.0.0.1", "localhost"] in lines
    assert ["10.100.228.254", "login"] in lines
    assert ["10.100.228.1", "login-1"] in lines
    assert ["10.100.228.2", "login-2"] in lines


def test_slurm_conf_names_the_nodes_own_addresses(tmp_path: Path) -> None:
    lay = Layout(tmp_path / "sb")
    lay.etc.mkdir(parents=True)
    p = _net()
    render.write_slurm_configs(lay, p, _gpus(lay, p), "pw")
    conf = lay.slurm_conf.read_text().splitlines()
    assert "SlurmctldHost=login(10.100.228.254)" in conf
    assert "AccountingStorageHost=10.100.228.254" in conf
    nodes = [ln for ln in conf if ln.startswith("NodeName=")]
    assert [ln.split()[1] for ln in nodes] == ["NodeAddr=10.100.228.1", "NodeAddr=10.100.228.2"]


def test_a_nodes_slurmd_runs_in_its_namespace_with_its_files_bound(tmp_path: Path) -> None:
    lay = Layout(tmp_path / "sb")
    p = _net()
    argv = nodenet.node_argv(lay, p, "login-2", ["/usr/sbin/slurmd", "-D", "-N", "login-2"])
    assert argv[:2] == ["nsenter", "--net=/run/netns/acbs228-login-2"]
    # The names and paths are arguments of the shell's script, not part of its text.
    script = argv[argv.index("-c") + 1]
    assert "login-2" not in script and str(tmp_path) not in script
    rest = argv[argv.index("-c") + 2 :]
    assert rest == [
        "acbslurm-node",
        "login-2",
        "/etc/netns/acbs228-login-2/hosts",
        "/etc/hosts",
        str(lay.user_runtime_dir("user1", "login-2")),
        str(lay.user_runtime_dir("user1")),
        "--",
        "/usr/sbin/slurmd",
        "-D",
        "-N",
        "login-2",
    ]


def test_the_scripts_binds_each_pair_and_runs_the_program(tmp_path: Path) -> None:
    """The shell text itself, with mount, hostname and exec stood in by functions (no
    root needed): pairs up to "--", then the program with its arguments intact."""
    log = tmp_path / "log"
    stand_ins = (
        f'mount() {{ echo "mount $*" >> {log}; }}; hostname() {{ echo "hostname $*" >> {log}; }}; '
    )
    argv = nodenet._with_binds(
        "n 1", [(Path("/a b"), Path("/c")), (Path("/d"), Path("/e"))], ["echo", "x;y", "$HOME"]
    )
    script = argv[argv.index("-c") + 1]
    out = subprocess.run(
        ["sh", "-c", stand_ins + script, *argv[argv.index("-c") + 2 :]],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout == "x;y $HOME\n"
    assert log.read_text().splitlines() == [
        "hostname n 1",
        "mount --bind /a b /c",
        "mount --bind /d /e",
    ]


def test_node_networks_need_two_nodes_and_a_running_sandbox_keeps_its_own() -> None:
    with pytest.raises(SetupError, match="needs --nodes 2"):
        _with_network(Params(nodes=1), True)
    assert _with_network(Params(nodes=2), True).node_network
    assert _with_network(_net(), None).node_network  # as before
    with pytest.raises(SetupError, match="--no-node-network"):
        _same_network(Path("/sb"), _net(), False)
    _same_network(Path("/sb"), _net(), None)


def test_a_nodes_daemon_is_a_component_started_before_its_slurmd_and_not_restarted_alone(
    tmp_path: Path,
) -> None:
    from acbslurm.errors import ConfigError
    from acbslurm.sandbox import Sandbox

    sb = Sandbox(tmp_path / "sb")
    sb.layout.root.mkdir()
    sb.layout.save_params(_net())
    names = sb.components()
    for node in ("login-1", "login-2"):
        assert names.index(f"dockerd-user1@{node}") < names.index(f"slurmd-{node}")
    with pytest.raises(ConfigError, match="cannot be restarted alone"):
        sb.restart("dockerd-user1@login-2")
    with pytest.raises(ConfigError, match="unknown component"):
        sb.restart("dockerd-user1@login-3")
