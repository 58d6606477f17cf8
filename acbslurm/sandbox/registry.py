"""The sandbox's private registry: Debian's docker-registry (2.8) with a login.

Started on demand (`acbslurm sandbox registry`, the tests' fixture), not by ``up``: only
the tests of pulls with a login need it. It serves HTTP with htpasswd (bcrypt) basic
auth, as a site's registry that refuses anonymous pulls, and holds one image, the
sandbox's busybox, pushed there as ``<address>/private/busybox:1``.

Where it listens: the users' rootless daemons pull from their own network namespace.
rootlesskit gives them slirp4netns with ``--disable-host-loopback`` (dockerd-rootless.sh
passes it always), so this machine's 127.0.0.1 is not theirs: a registry there would
refuse every pull. It listens on an address of this machine they do reach: the node
network's gateway with node networks (nodenet.py), else this machine's own address (the
default route's interface). That address is not a loopback one, so Docker would speak
HTTPS to it: the sandbox's daemons are started with ``--insecure-registry`` for exactly
this host and port (docker.py), as a site lists its HTTP mirror in ``insecure-registries``.
It runs as ``nobody``: it parses what anyone who reaches that address sends.
"""

from __future__ import annotations

import http.client
import json
import os
import pwd
import secrets
import shutil
from pathlib import Path

from acbslurm import proc
from acbslurm.errors import CommandError, SetupError
from acbslurm.sandbox import nodenet
from acbslurm.sandbox.layout import Layout, Params
from acbslurm.sandbox.procs import Proc, read_proc, spawn, wait_for
from acbslurm.values import field, frozen

COMPONENT = "registry"
PROGRAM = "docker-registry"
# Above every port of the sandbox's own (layout.py: below port_base + 4 + MAX_NODES, 20)
# and below the next sandbox's base (100 apart).
PORT_OFFSET = 20
ACCOUNT = "user1"
# The repository and tag the sandbox's busybox gets there (Sandbox.registry pushes it).
PRIVATE_IMAGE = "private/busybox:1"
RUN_AS = "nobody"
# Interfaces that are not this machine's own way out: other sandboxes' node-network
# bridges and their veths (they come and go), Docker's bridges.
_NOT_OURS = ("acbs", "docker", "veth", "br-")


@frozen
class Login:
    """The registry's address and its one account (the password never in a repr)."""

    address: str
    username: str
    password: str = field(repr=False)

    def image(self, name: str = PRIVATE_IMAGE) -> str:
        return f"{self.address}/{name}"


def port(p: Params) -> int:
    return p.port_base + PORT_OFFSET


def host_address() -> str:
    """This machine's IPv4 address a rootless daemon reaches through slirp4netns: that
    of the default route's interface, else the first global one."""
    via = {r.get("dev") for r in _ip_json("route", "show", "default")}
    found = sorted((name not in via, addr) for name, addr in _addresses())
    if not found:
        raise SetupError(
            "this machine has no IPv4 address but loopback ones: the sandbox's rootless "
            "daemons (slirp4netns --disable-host-loopback) could reach no registry here"
        )
    return found[0][1]


def _addresses() -> list[tuple[str, str]]:
    """(interface, IPv4 address) of this machine's own global addresses."""
    out = []
    for link in _ip_json("addr", "show", "scope", "global"):
        name = str(link.get("ifname", ""))
        infos = link.get("addr_info")
        if not name or name.startswith(_NOT_OURS) or not isinstance(infos, list):
            continue
        out += [
            (name, str(a["local"]))
            for a in infos
            if isinstance(a, dict) and a.get("family") == "inet" and a.get("local")
        ]
    return out


def _ip_json(*args: str) -> list[dict[str, object]]:
    """``ip -j -4 ARGS``'s objects; none when ``ip`` fails (no address is then found)."""
    try:
        out = proc.run(["ip", "-j", "-4", *args], timeout=10, check=False).stdout
    except CommandError:  # not installed, timed out
        return []
    try:
        data = json.loads(out or "[]")
    except ValueError:
        return []
    return [d for d in data if isinstance(d, dict)] if isinstance(data, list) else []


def host(p: Params) -> str:
    """The address the registry listens on (the module's docstring says why)."""
    return nodenet.gateway(p) if p.node_network else host_address()


def address(p: Params) -> str:
    return f"{host(p)}:{port(p)}"


def _dir(layout: Layout) -> Path:
    return layout.etc / "registry"


def account_file(layout: Layout) -> Path:
    return _dir(layout) / "account.json"


def storage(layout: Layout) -> Path:
    return layout.state / "registry"


def login(layout: Layout, p: Params) -> Login:
    """The account (made on first use: a random password, root's file only)."""
    f = account_file(layout)
    if not f.exists():
        f.parent.mkdir(parents=True, exist_ok=True)
        data = {"username": ACCOUNT, "password": secrets.token_hex(16)}
        fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh)
    data = json.loads(f.read_text())
    return Login(address(p), str(data["username"]), str(data["password"]))


def _write_config(layout: Layout, p: Params, who: Login) -> Path:
    """config.yml (JSON is YAML) and the htpasswd file, readable by ``nobody`` only
    through its group; ``htpasswd -i`` takes the password on stdin, not in its argv."""
    nobody = pwd.getpwnam(RUN_AS)
    d = _dir(layout)
    d.mkdir(parents=True, exist_ok=True)
    line = proc.run(
        ["htpasswd", "-B", "-i", "-n", who.username], input=who.password, timeout=30
    ).stdout.strip()
    passwords = d / "htpasswd"
    passwords.write_text(line + "\n")
    os.chown(passwords, 0, nobody.pw_gid)
    passwords.chmod(0o640)
    data = storage(layout)
    data.mkdir(parents=True, exist_ok=True)
    os.chown(data, nobody.pw_uid, nobody.pw_gid)
    config = {
        "version": 0.1,
        "log": {"level": "info", "fields": {"service": "registry"}},
        "storage": {"filesystem": {"rootdirectory": str(data)}, "delete": {"enabled": True}},
        # The secret signs upload state; one per start is enough for one instance.
        "http": {"addr": address(p), "secret": secrets.token_hex(16)},
        "auth": {"htpasswd": {"realm": "acbslurm-sandbox", "path": str(passwords)}},
    }
    path = d / "config.yml"
    path.write_text(json.dumps(config, indent=2) + "\n")
    os.chown(path, 0, nobody.pw_gid)
    path.chmod(0o640)
    return path


def ready(p: Params) -> bool:
    """The registry answers its API's base (``/v2/``: 401 without a login)."""
    conn = http.client.HTTPConnection(host(p), port(p), timeout=2)
    try:
        conn.request("GET", "/v2/")
        answer = conn.getresponse()
        return answer.getheader("Docker-Distribution-Api-Version") == "registry/2.0"
    except OSError:
        return False
    finally:
        conn.close()


def running(layout: Layout) -> Proc | None:
    pr = read_proc(layout.run, COMPONENT)
    return pr if pr is not None and pr.alive() else None


def start(layout: Layout, p: Params, marker: str) -> Login:
    """The registry, started unless it runs; its address and account."""
    who = login(layout, p)
    if running(layout) is not None and ready(p):
        return who
    if shutil.which(PROGRAM) is None:
        raise SetupError(f"{PROGRAM} is not installed; run: make setup (package docker-registry)")
    config = _write_config(layout, p, who)
    nobody = pwd.getpwnam(RUN_AS)
    log = layout.log_file(COMPONENT)
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/nonexistent", "LANG": "C.UTF-8"}
    pr = spawn(
        COMPONENT,
        [PROGRAM, "serve", str(config)],
        run_dir=layout.run,
        log_file=log,
        marker=marker,
        env=env,
        user=nobody.pw_uid,
        group=nobody.pw_gid,
        cwd="/",
    )
    wait_for("docker-registry", lambda: ready(p), proc=pr, log_file=log, timeout=30)
    return who


def has_image(layout: Layout, name: str = PRIVATE_IMAGE) -> bool:
    """Whether the registry's storage holds ``name`` (repository:tag), read on disk: no
    login needed."""
    repo, _, tag = name.rpartition(":")
    tags = storage(layout) / "docker/registry/v2/repositories" / repo / "_manifests/tags"
    return (tags / tag / "current" / "link").is_file()
