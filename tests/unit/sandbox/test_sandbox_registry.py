"""The sandbox's registry: where it listens and what the daemons are told (registry.py).

It runs on the sandbox (tests/integration/test_registry_login_sandbox.py); these check
the address rules without starting anything.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from acbslurm.errors import SetupError
from acbslurm.sandbox import docker, nodenet, registry
from acbslurm.sandbox.layout import Layout, Params

LINKS = [
    {"ifname": "acbs340", "addr_info": [{"family": "inet", "local": "10.101.84.254"}]},
    {"ifname": "docker0", "addr_info": [{"family": "inet", "local": "172.17.0.1"}]},
    {"ifname": "eth1", "addr_info": [{"family": "inet", "local": "198.51.100.7"}]},
    {"ifname": "eth0", "addr_info": [{"family": "inet", "local": "192.0.2.2"}]},
]


def fake_ip(routes: list[dict[str, object]], links: list[dict[str, object]]) -> object:
    return lambda *args: routes if args[0] == "route" else links


def test_the_default_routes_address_is_chosen_over_other_sandboxes_bridges(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(registry, "_ip_json", fake_ip([{"dev": "eth0"}], LINKS))
    assert registry.host_address() == "192.0.2.2"
    monkeypatch.setattr(registry, "_ip_json", fake_ip([], LINKS))  # no default route
    assert registry.host_address() in ("198.51.100.7", "192.0.2.2")
    monkeypatch.setattr(registry, "_ip_json", fake_ip([], LINKS[:2]))
    with pytest.raises(SetupError, match="no IPv4 address but loopback ones"):
        registry.host_address()


def test_the_daemons_may_speak_http_to_that_registry_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(registry, "host_address", lambda: "192.0.2.2")
    lay = Layout(tmp_path)
    lay.etc.mkdir(parents=True)
    lay.save_params(Params(node="n1", port_base=34000))
    argv = docker.daemon_argv(lay, "user1")
    assert "--insecure-registry=192.0.2.2:34020" in argv
    net = Params(node="n1", port_base=34000, nodes=2, node_network=True)
    lay.save_params(net)
    assert registry.address(net) == f"{nodenet.gateway(net)}:34020"
    assert f"--insecure-registry={registry.address(net)}" in docker.daemon_argv(
        lay, "user1", "n1-1"
    )


def test_the_image_is_found_in_the_registrys_storage(tmp_path: Path) -> None:
    lay = Layout(tmp_path)
    assert not registry.has_image(lay)
    link = registry.storage(lay) / "docker/registry/v2/repositories/private/busybox"
    link = link / "_manifests/tags/1/current/link"
    link.parent.mkdir(parents=True)
    link.write_text("sha256:0")
    assert registry.has_image(lay)
    assert registry.Login("a:1", "u", "pw-9").image() == "a:1/private/busybox:1"
    assert "pw-9" not in repr(registry.Login("a:1", "u", "pw-9"))
