"""What a job's container learns of the job: Slurm's variables and the rendezvous of a
distributed program.

The container is the Docker daemon's child, so it inherits nothing of the task's
environment: the variables a program in a job reads (its rank, the job's nodes, whether
this run is a restart) are copied here, and the ones `torch.distributed`'s ``env://``
rendezvous (and most launchers) read are derived from them, as pyxis' users get them
from the task. The user's own ``--env``/``--env-file`` values always win.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from acbslurm.errors import ConfigError
from acbslurm.slurm.hostlist import first_host
from acbslurm.units import is_ascii_int

# Copied from the task's environment when set. Not SLURM_CONF or other paths into the
# node's Slurm: the container has no Slurm of its own.
SLURM_VARIABLES = (
    "SLURM_JOB_ID",
    "SLURM_JOB_NAME",
    "SLURM_JOB_USER",
    "SLURM_JOB_PARTITION",
    "SLURM_JOB_ACCOUNT",
    "SLURM_JOB_QOS",
    "SLURM_CLUSTER_NAME",
    "SLURM_JOB_NODELIST",
    "SLURM_NODELIST",
    "SLURM_JOB_NUM_NODES",
    "SLURM_NNODES",
    "SLURM_NTASKS",
    "SLURM_NPROCS",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE",
    "SLURM_CPUS_ON_NODE",
    "SLURM_CPUS_PER_TASK",
    "SLURM_JOB_CPUS_PER_NODE",
    "SLURM_MEM_PER_NODE",
    "SLURM_MEM_PER_CPU",
    "SLURM_GPUS_ON_NODE",
    "SLURM_RESTART_COUNT",
    "SLURM_ARRAY_JOB_ID",
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_COUNT",
    "SLURM_ARRAY_TASK_MIN",
    "SLURM_ARRAY_TASK_MAX",
    "SLURM_ARRAY_TASK_STEP",
    "SLURMD_NODENAME",
    # The step's and the task's: set by srun.
    "SLURM_STEP_ID",
    "SLURM_STEP_NODELIST",
    "SLURM_STEP_NUM_NODES",
    "SLURM_STEP_NUM_TASKS",
    "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NODEID",
)

# torch.distributed's env:// rendezvous (and Lightning, Accelerate, DeepSpeed) reads
# these. A port every rank agrees on without talking: from the job's id, below Linux's
# ephemeral range (32768-60999), so that it is rarely a port some client holds.
RENDEZVOUS_PORT_BASE = 10000
RENDEZVOUS_PORTS = 20000


def rendezvous_port(job_id: str) -> int:
    return RENDEZVOUS_PORT_BASE + int(job_id) % RENDEZVOUS_PORTS


def tasks_on_node(tasks_per_node: str, node_id: int) -> int | None:
    """Slurm's ``2(x3),1`` (the step's tasks per node, in node order) at ``node_id``."""
    nodes: list[int] = []
    for part in tasks_per_node.split(","):
        count, _, times = part.partition("(x")
        try:
            nodes += [int(count)] * (int(times.rstrip(")")) if times else 1)
        except ValueError:
            return None
    return nodes[node_id] if 0 <= node_id < len(nodes) else None


# complexity: one `if` per variable, each set only where Slurm gives what it needs; the variables
# are independent, so a helper per variable would be a one-use function for a two-line rule.
def rendezvous_env(env: Mapping[str, str]) -> dict[str, str]:
    """RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR (the step's first
    node) and MASTER_PORT, for a task of a step (srun); empty outside one."""
    if "SLURM_PROCID" not in env or "SLURM_STEP_ID" not in env:
        return {}
    out = {"RANK": env["SLURM_PROCID"]}
    world = env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_NTASKS")
    if world:
        out["WORLD_SIZE"] = world
    if "SLURM_LOCALID" in env:
        out["LOCAL_RANK"] = env["SLURM_LOCALID"]
    per_node = env.get("SLURM_STEP_TASKS_PER_NODE", "")  # this node's tasks of the step
    node_id = env.get("SLURM_NODEID", "")
    local = tasks_on_node(per_node, int(node_id)) if per_node and is_ascii_int(node_id) else None
    if local is not None:
        out["LOCAL_WORLD_SIZE"] = str(local)
    nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST")
    if nodes:
        # A list this parser does not know: the user sets MASTER_ADDR.
        with contextlib.suppress(ConfigError):
            out["MASTER_ADDR"] = first_host(nodes)  # the step's first node
    job_id = env.get("SLURM_JOB_ID", "")
    if is_ascii_int(job_id):
        out["MASTER_PORT"] = str(rendezvous_port(job_id))
    return out


# The libraries' "which interface carries the ranks' traffic": without them gloo and
# NCCL take the address the host's name resolves to, which /etc/hosts often maps to the
# loopback (Debian's 127.0.1.1; Docker's host-network containers get "::1 <name>"), and
# the other ranks are told to connect to it.
SOCKET_IFNAME_VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
_SIOCGIFADDR = 0x8915


def interface_of(address: str) -> str | None:
    """The name of this network namespace's interface whose IPv4 address is ``address``."""
    # only a step on several nodes: `acbslurm run` imports this module
    import fcntl
    import socket
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                got = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:  # no IPv4 address
                continue
            if socket.inet_ntoa(got[20:24]) == address:
                return name
    return None


def socket_ifname_env(env: Mapping[str, str]) -> dict[str, str]:
    """GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME: the interface of the address this
    node's name (SLURMD_NODENAME) has, the one the other nodes reach it at; for a step
    on several nodes whose container has the node's network. Empty when not found."""
    import socket  # only a step on several nodes: `acbslurm run` imports this module

    node = env.get("SLURMD_NODENAME", "")
    nodes = env.get("SLURM_STEP_NUM_NODES") or env.get("SLURM_NNODES") or "1"
    if not node or not is_ascii_int(nodes) or int(nodes) < 2:
        return {}
    try:
        infos = socket.getaddrinfo(node, None, socket.AF_INET, socket.SOCK_STREAM)
    except OSError:
        return {}
    for *_, addr in infos:
        name = interface_of(str(addr[0]))
        if name and name != "lo":
            return dict.fromkeys(SOCKET_IFNAME_VARIABLES, name)
    return {}


def job_env(
    env: Mapping[str, str], given: Mapping[str, str], host_network: bool = False
) -> dict[str, str]:
    """The container's environment: Slurm's variables of this task and the rendezvous
    derived from them (with the node's interface for gloo and NCCL when the container
    has the node's network), then the user's ``given`` ones, which win."""
    out = {k: env[k] for k in SLURM_VARIABLES if k in env}
    out.update(rendezvous_env(env))
    if host_network:
        out.update(socket_ifname_env(env))
    out.update(given)
    return out
