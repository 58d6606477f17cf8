"""Each node of a multi-node sandbox on a network of its own (`up --nodes N --node-network`).

Without it every slurmd of the sandbox shares this machine's network, and so do the
containers: two "nodes" reach each other through 127.0.0.1, which no two machines do.
With it each node is a network namespace with its own address on a bridge the sandbox
makes (10.X.Y.0/24, apart for each port base; nothing routes it off the machine), its
own /etc/hosts naming every node (/etc/netns/NS/hosts, bound over /etc/hosts), and its
own rootless Docker daemon for the sandbox user.

The node's namespace is the one that user's daemon (rootlesskit) makes: a rootless
daemon can give its containers only a network namespace its own user namespace owns,
and Docker 20.10 to 28.5 cannot leave the daemon in the host's (``--detach-netns`` is
rootlesskit's, not theirs: the daemon's bridge set-up fails with EPERM). Root adds the
node's interface to that namespace and starts the node's slurmd in it, so a job on the
node and its containers with the host network (``--network host``) see the node's
address, as a daemon with ``--detach-netns`` gives them on a site.

The node's slurmd also sees the user's runtime directory as that node's (a bind mount in
its mount namespace): ``$XDG_RUNTIME_DIR/docker.sock`` is the node's own daemon, one path
for every node, as on separate machines.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from acbslurm import proc
from acbslurm.errors import SetupError
from acbslurm.sandbox.layout import Layout, Params

NETNS_ETC = Path("/etc/netns")
# The node's interface inside its namespace (the name NCCL_SOCKET_IFNAME and
# GLOO_SOCKET_IFNAME take on the sandbox).
NODE_IFNAME = "eth0"
# sh -c text: name the host as the node, bind each node's file over the shared path
# (pairs up to "--"), then exec the program; the name, the paths and the program are
# positional arguments, never in the text.
_BIND_AND_EXEC = (
    'hostname "$1" || exit 1; shift; '
    'while [ "$1" != -- ]; do mount --bind "$1" "$2" || exit 1; shift 2; done; shift; exec "$@"'
)


def _index(p: Params) -> int:
    """Sandboxes' port bases are 100 apart (layout.py): one subnet each."""
    return p.port_base // 100


def subnet(p: Params) -> str:
    """The first three octets of the sandbox's node network, ``10.X.Y``."""
    i = _index(p)
    return f"10.{100 + (i // 256) % 100}.{i % 256}"


def gateway(p: Params) -> str:
    """The address of this machine on the node network: slurmctld's and slurmdbd's."""
    return f"{subnet(p)}.254"


def node_addr(p: Params, node: str) -> str:
    """``node``'s address (Slurm's NodeAddr)."""
    return f"{subnet(p)}.{p.node_names.index(node) + 1}"


def controller_addr(p: Params) -> str:
    """The address the nodes reach slurmctld and slurmdbd at."""
    return gateway(p) if p.node_network else "127.0.0.1"


def slurm_node_addr(p: Params, node: str) -> str:
    return node_addr(p, node) if p.node_network else "127.0.0.1"


def bridge(p: Params) -> str:
    return f"acbs{_index(p)}"


def netns(p: Params, node: str) -> str:
    return f"acbs{_index(p)}-{node}"


def _veth(p: Params, node: str) -> str:
    return f"acbs{_index(p)}n{p.node_names.index(node) + 1}"


def hosts_file(p: Params, node: str) -> Path:
    return NETNS_ETC / netns(p, node) / "hosts"


def hosts_text(p: Params) -> str:
    lines = ["127.0.0.1\tlocalhost", f"{gateway(p)}\t{p.node}"]
    lines += [f"{node_addr(p, n)}\t{n}" for n in p.node_names]
    return "\n".join(lines) + "\n"


def _ip(*args: str) -> None:
    res = proc.run(["ip", *args], check=False, timeout=30)
    if res.returncode != 0:
        msg = (res.stderr or res.stdout).strip()
        raise SetupError(f"`ip {' '.join(args)}` failed (exit {res.returncode}): {msg}")


def _ip_if_there(*args: str) -> None:
    """An ``ip`` removal of what may not be there (left by a killed sandbox, or gone
    with its namespace): its failure is no error."""
    proc.run(["ip", *args], check=False, timeout=30)


def ensure_bridge(p: Params) -> None:
    """The bridge the nodes' interfaces hang on, with this machine's address on it."""
    br = bridge(p)
    if proc.run(["ip", "link", "show", br], check=False, timeout=30).returncode != 0:
        _ip("link", "add", br, "type", "bridge")
        _ip("addr", "add", f"{gateway(p)}/24", "dev", br)
    _ip("link", "set", br, "up")


def write_hosts(p: Params, node: str) -> Path:
    path = hosts_file(p, node)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(hosts_text(p))
    path.chmod(0o644)
    return path


def attach(p: Params, node: str, pid: int) -> None:
    """Name ``pid``'s network namespace as ``node``'s and give it the node's interface
    and address on the bridge (the daemon's rootlesskit made the namespace)."""
    ns, veth = netns(p, node), _veth(p, node)
    _ip_if_there("netns", "delete", ns)
    _ip_if_there("link", "delete", veth)
    _ip("netns", "attach", ns, str(pid))
    _ip("link", "add", veth, "type", "veth", "peer", "name", f"{veth}p")
    _ip("link", "set", f"{veth}p", "netns", ns)
    _ip("link", "set", veth, "master", bridge(p), "up")
    inside = ["netns", "exec", ns, "ip"]
    _ip(*inside, "link", "set", f"{veth}p", "name", NODE_IFNAME)
    _ip(*inside, "addr", "add", f"{node_addr(p, node)}/24", "dev", NODE_IFNAME)
    _ip(*inside, "link", "set", NODE_IFNAME, "up")
    # The node's default route through its own interface, not rootlesskit's slirp
    # (10.0.2.100, the same address in every node): programs that find "this host's
    # address" by the default route (vLLM's get_ip, many launchers) then find the node's.
    # Nothing routes off the machine from there.
    _ip(*inside, "route", "replace", "default", "via", gateway(p), "dev", NODE_IFNAME)


def _with_binds(node: str, binds: list[tuple[Path, Path]], argv: list[str]) -> list[str]:
    """``argv`` in mount and UTS namespaces of its own: the host name is ``node``'s
    (host-network containers take it), each (node's, shared) pair bound. Not ``ip netns
    exec``: it remounts /sys, and slurmd's cgroup mounts with it."""
    pairs = [str(x) for pair in binds for x in pair]
    head = ["unshare", "--mount", "--uts", "--propagation", "slave", "sh", "-c", _BIND_AND_EXEC]
    return [*head, "acbslurm-node", node, *pairs, "--", *argv]


def daemon_argv(node: str, hosts: Path, uid: int, gid: int, argv: list[str]) -> list[str]:
    """``argv`` as ``uid``, where /etc/hosts is the node's (the daemon copies it into
    host-network containers): started as root for the mount, then dropped to the user
    (setpriv keeps the environment)."""
    drop = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--init-groups"]
    return _with_binds(node, [(hosts, Path("/etc/hosts"))], [*drop, *argv])


def node_argv(layout: Layout, p: Params, node: str, argv: list[str]) -> list[str]:
    """``argv`` (the node's slurmd) in the node's network namespace, seeing the user's
    runtime directory as the node's."""
    binds = [
        (hosts_file(p, node), Path("/etc/hosts")),
        (layout.user_runtime_dir(p.user, node), layout.user_runtime_dir(p.user)),
    ]
    enter = ["nsenter", f"--net=/run/netns/{netns(p, node)}"]
    return [*enter, *_with_binds(node, binds, argv)]


def teardown(p: Params) -> None:
    """The named namespaces (their bind mounts keep them alive), the interfaces and the
    bridge, those that are there."""
    for node in p.node_names:
        _ip_if_there("netns", "delete", netns(p, node))
        shutil.rmtree(NETNS_ETC / netns(p, node), ignore_errors=True)
        _ip_if_there("link", "delete", _veth(p, node))
    _ip_if_there("link", "delete", bridge(p))
