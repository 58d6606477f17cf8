"""Containers on two nodes that talk over a network, as on two machines (issue 28).

The ``net`` sandbox (tests/conftest.py; `sandbox up --nodes 2 --node-network`) gives each
node a network namespace of its own: its own address on a bridge of the sandbox's, its
own /etc/hosts naming the nodes, its own host name and its own Docker daemon of user1
(acbslurm/sandbox/nodenet.py). Nothing is shared between the nodes but the bridge, so
what one node's container reaches of the other it reaches over that network.

As user1: a `torch.distributed` job from a spec, one rank per node, rendezvous at the
first node (MASTER_ADDR, MASTER_PORT from acbslurm), gloo's all_reduce checked by each
rank; and a service in a job's container reached at its node's address from this
machine (the login node), through the node's network.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from sandboxtest import IMAGE, REPO, acbslurm_as, job_status, submit_spec
from sandboxtest import wait_until as wait

from acbslurm.sandbox import Sandbox, docker, nodenet, torchimage

pytestmark = pytest.mark.integration

as_user = functools.partial(acbslurm_as, timeout=120)
ENDED = ("CANCELLED", "COMPLETED", "FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")

# Each rank: the process group over gloo from the environment acbslurm gives the
# container (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), an all_reduce of rank + 1,
# checked against the sum every rank must get.
ALLREDUCE = """\
import datetime, fcntl, os, socket, struct, sys
import torch
import torch.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=90))
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
want = world * (world + 1) / 2
ifname = os.environ.get("GLOO_SOCKET_IFNAME", "")
addr = "none"
if ifname:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", ifname.encode()[:15]))
        addr = socket.inet_ntoa(packed[20:24])
print(f"RANK {rank} of {world} host {socket.gethostname()} ifname {ifname} addr {addr} "
      f"master {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']} "
      f"sum {t.item():g} want {want:g}", flush=True)
dist.barrier()
dist.destroy_process_group()
sys.exit(0 if t.item() == want else 1)
"""


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="acbslurm-net-") as d:
        os.chmod(d, 0o777)  # user1's jobs write their output here
        yield Path(d)


@pytest.fixture(scope="module")
def torch_image(net: Sandbox) -> str:
    """The image with Python and CPU torch, in each node's daemon (built once, cached);
    its torch is the vLLM environment's, so without one the test skips, as vLLM's do."""
    if not torchimage.vllm_python().is_file():
        pytest.skip(f"no vLLM environment at {torchimage.vllm_python()} (scripts/setup.sh)")
    name, tar = torchimage.ensure_rootfs(lambda m: print("torch image:", m))
    p = net.params
    for node in p.node_names:
        host = docker.docker_host(net.layout, p.user, node)
        torchimage.import_into(net.layout, p.user, host, name, tar)
    return name


def state(sb: Sandbox, job: str) -> str:
    out = sb.run_slurm(["scontrol", "-o", "show", "job", job], check=False).stdout
    return next((f[9:] for f in out.split() if f.startswith("JobState=")), "")


def ended(sb: Sandbox, job: str, out: Path, timeout: float = 240) -> str:
    try:
        return str(
            wait(f"job {job} ended", lambda: state(sb, job) in ENDED and state(sb, job), timeout)
        )
    except AssertionError as exc:
        shown = out.read_text() if out.exists() else "(no file)"
        raise AssertionError(f"{exc}; {out}:\n{shown}") from None


def test_each_node_has_its_own_address_name_and_daemon(net: Sandbox) -> None:
    p = net.params
    shown = net.run_slurm(["scontrol", "-o", "show", "node"]).stdout
    addrs = {}
    for line in shown.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        addrs[fields["NodeName"]] = fields["NodeAddr"]
    assert addrs == {n: nodenet.node_addr(p, n) for n in p.node_names}
    assert len(set(addrs.values())) == len(addrs)
    status = {s.name: s for s in net.status()}
    hosts = {status[docker.component(p.user, n)].detail for n in p.node_names}
    assert len(hosts) == len(p.node_names), status  # a daemon of its own per node
    assert all(status[docker.component(p.user, n)].ready for n in p.node_names), status


def test_torch_distributed_across_two_nodes_from_a_spec(
    net: Sandbox, workdir: Path, torch_image: str
) -> None:
    p = net.params
    (workdir / "allreduce.py").write_text(ALLREDUCE)
    (workdir / "allreduce.py").chmod(0o644)
    job = submit_spec(
        net,
        workdir,
        f"""\
name: allreduce
partition: p1
nodes: 2
ntasks_per_node: 1
gpus: 1
mem: 2G
time: "5"
output: out-%j.txt
container:
  image: {torch_image}
  pull: never
  mounts: ["{workdir}:/work:ro"]
  command: [python3, /work/allreduce.py]
""",
    )
    out = workdir / f"out-{job}.txt"
    final = ended(net, job, out)
    text = out.read_text() if out.exists() else ""
    assert final == "COMPLETED", text
    ranks = {}
    for line in text.splitlines():
        if line.startswith("RANK "):
            f = line.split()
            ranks[int(f[1])] = dict(zip(f[4::2], f[5::2], strict=False))
    assert sorted(ranks) == [0, 1], text
    first = p.node_names[0]
    for rank, node in enumerate(p.node_names):
        seen = ranks[rank]
        # Each rank on its own node, under the node's name; gloo told (by acbslurm) to
        # use the interface of the node's address: its connections between the ranks
        # crossed the node network.
        assert (seen["host"], seen["addr"]) == (node, nodenet.node_addr(p, node)), text
        assert seen["ifname"] == nodenet.NODE_IFNAME, text
        assert seen["master"].split(":")[0] == first, text
        assert seen["sum"] == seen["want"] == "3", text


def test_a_service_in_a_job_is_reached_at_its_nodes_address(net: Sandbox, workdir: Path) -> None:
    p = net.params
    node = p.node_names[1]
    port = 20000 + int(time.monotonic_ns() % 5000)
    job = submit_spec(
        net,
        workdir,
        f"""\
name: service
partition: p1
sbatch_args: ["--nodelist={node}"]
gpus: 1
mem: 200M
time: "5"
output: out-%j.txt
container:
  image: {IMAGE}
  pull: never
  network: host
  command: [sh, -c, 'while true; do echo "served by $(hostname)" | nc -l -p {port}; done']
""",
    )
    out = workdir / f"out-{job}.txt"
    try:
        wait(f"job {job} running", lambda: state(net, job) == "RUNNING")

        def answer() -> str:
            try:
                with socket.create_connection((nodenet.node_addr(p, node), port), timeout=2) as s:
                    return s.recv(100).decode()
            except OSError:
                return ""

        got = wait(f"an answer from {node}:{port}", answer, timeout=60)
        assert got.strip() == f"served by {node}", got
        # `acbslurm status` says where: the node's address, which answers from here.
        addr = nodenet.node_addr(p, node)
        row = job_status(net, "user1", job)
        assert row["published"] == [{"node": node, "port": "host network", "address": addr}], row
        table = as_user(net, "user1", "status", job, cwd=workdir).stdout
        assert f"has the node's network: its ports are reached at {addr} ({node})" in table
    finally:
        res = as_user(net, "user1", "cancel", job)
    assert res.returncode == 0, res.stderr
    assert ended(net, job, out) == "CANCELLED"


PAGE = 'mkdir /w && echo "job $SLURM_JOB_ID" > /w/index.html && exec httpd -f -p 8080 -h /w'


def test_one_port_published_on_each_node_answers_at_each_nodes_address(
    net: Sandbox, workdir: Path
) -> None:
    """`publish` of one port by a job on each node: each node's daemon publishes it in
    the node's network (as on two machines; not both on this one, where the second
    collided), each answers at its node's address with its own job's page, and
    `acbslurm status` shows that address (this machine does not know the node names)."""
    p = net.params
    port = 20000 + int(time.monotonic_ns() % 5000)
    jobs = {
        node: submit_spec(
            net,
            workdir,
            f"""\
name: web
partition: p1
sbatch_args: ["--nodelist={node}"]
gpus: 1
mem: 200M
time: "5"
output: out-%j.txt
container:
  image: {IMAGE}
  pull: never
  publish: ["{port}:8080"]
  command: [sh, -c, '{PAGE}']
""",
        )
        for node in p.node_names
    }

    def page(addr: str) -> str:
        try:
            # No proxy: the node's address is on this machine's bridge, never a proxy's.
            direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            with direct.open(f"http://{addr}:{port}/", timeout=5) as r:
                return str(r.read().decode())
        except OSError:
            return ""

    try:
        for node, job in jobs.items():
            addr = nodenet.node_addr(p, node)
            got = wait(f"job {job}'s page at {addr}:{port}", lambda a=addr: page(a), timeout=60)
            assert got.strip() == f"job {job}", got
            row = wait(
                f"job {job}'s published port in status",
                lambda j=job: job_status(net, "user1", j)["published"],
                timeout=30,
            )
            assert row == [{"node": node, "port": "8080/tcp", "address": f"{addr}:{port}"}]
        table = as_user(net, "user1", "status", cwd=workdir).stdout
        for node, job in jobs.items():
            addr = nodenet.node_addr(p, node)
            assert f"job {job} publishes 8080/tcp at {addr}:{port} ({node})" in table, table
    finally:
        res = as_user(net, "user1", "cancel", *jobs.values())
    assert res.returncode == 0, res.stderr
    for job in jobs.values():
        assert ended(net, job, workdir / f"out-{job}.txt") == "CANCELLED"


def test_doctor_tells_a_nodes_daemon_from_the_login_nodes(net: Sandbox, workdir: Path) -> None:
    """On a node, user1's daemon is in the node's network namespace (`acbslurm doctor`
    in a job there: ok); on this machine, the login node's daemon is in rootlesskit's
    own (root's `doctor --user user1`: a warning, as on a site without --detach-netns)."""
    node = net.params.node_names[1]
    job = submit_spec(
        net,
        workdir,
        f"""\
name: doctor
partition: p1
sbatch_args: ["--nodelist={node}"]
mem: 200M
time: "5"
output: out-%j.txt
command: acbslurm doctor --json > doctor-$SLURM_JOB_ID.json || true
""",
    )
    assert ended(net, job, workdir / f"out-{job}.txt") == "COMPLETED"
    checks = {
        c["name"]: c for c in json.loads((workdir / f"doctor-{job}.json").read_text())["checks"]
    }
    assert checks["node-network"]["status"] == "ok", checks["node-network"]
    res = subprocess.run(
        [sys.executable, "-m", "acbslurm", "doctor", "--json", "--user", "user1", "--node", node],
        capture_output=True,
        text=True,
        env={**os.environ, **net.env(), "PYTHONPATH": str(REPO)},
        timeout=120,
        check=False,
    )
    checks = {c["name"]: c for c in json.loads(res.stdout)["checks"]}
    assert checks["node-network"]["status"] == "warn", checks["node-network"]


def test_the_node_network_leaves_nothing_at_down(net: Sandbox) -> None:
    """A second sandbox with node networks, up then down: no namespace, interface or
    hosts file of it is left (the session's `net` keeps running meanwhile)."""
    other = Sandbox(f"{net.layout.root}-b")
    p = net.params
    try:
        other.up(
            1, p.port_base + 100, print, p.slurm, 2, docker_install=p.docker, node_network=True
        )
        q = other.params
        assert {nodenet.netns(q, n) for n in q.node_names} <= _netns_names()
    finally:
        other.down()
    q = other.params
    assert not {nodenet.netns(q, n) for n in q.node_names} & _netns_names()
    assert not any((nodenet.NETNS_ETC / nodenet.netns(q, n)).exists() for n in q.node_names)
    links = Path("/sys/class/net")
    assert not (links / nodenet.bridge(q)).exists()
    # The session's own network is untouched.
    assert {nodenet.netns(p, n) for n in p.node_names} <= _netns_names()


def _netns_names() -> set[str]:
    d = Path("/run/netns")
    return {f.name for f in d.iterdir()} if d.is_dir() else set()
