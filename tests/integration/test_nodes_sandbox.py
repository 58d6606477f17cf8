"""Two servers: `sandbox up --nodes 2` runs two slurmd on this
machine, each a node with its own 2 emulated GPUs, and a job spanning both is driven as
user1 and user2 through `acbslurm submit`, `status`, `report` and `cancel`.

The two nodes' hooks run for the same job id on one machine: each must map, record
and clean up its own node's GPUs only (their settings name ``{node}``).

These tests run on a sandbox of their own beside the session's (the ``two`` fixture of
tests/conftest.py: its directory + ``-n2``, its ports + 5000), so the other tests keep
their single 2-GPU node; tests/integration/test_serve_nodes_sandbox.py shares it.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sandboxtest import (
    IMAGE,
    TWO_NODES,
    TWO_NODES_GPUS,
    acbslurm_as,
    docker_api,
    dockerd_pid,
    hook_devices,
    job_containers,
    submit_spec,
)
from sandboxtest import wait_until as wait

from acbslurm.procfs import running
from acbslurm.sandbox import Sandbox

pytestmark = pytest.mark.integration

NODES, GPUS = TWO_NODES, TWO_NODES_GPUS
ENDED = ("CANCELLED", "COMPLETED", "FAILED")


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="acbslurm-nodes-") as d:
        os.chmod(d, 0o777)  # user1's jobs write their output here
        yield Path(d)


as_user = functools.partial(acbslurm_as, timeout=120)


# What each rank's container knows of the job (container/job_env.py).
RANK_LINE = (
    'echo "RANK $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT '
    '$SLURM_JOB_NODELIST $SLURM_NNODES $SLURM_NODEID $SLURMD_NODENAME"'
)
# Under CDI NVIDIA_VISIBLE_DEVICES is void: the sandbox spec's SANDBOX_CDI_GPU<n> name them.
CDI_GPUS = """$(env | sed -n "s/^SANDBOX_CDI_GPU[0-9]*=//p" | tr "\\n" ,)"""
SPEC = f"""\
name: two-nodes
partition: p1
nodes: {NODES}
ntasks_per_node: 1
gpus: {GPUS}
mem: 500M
time: "5"
output: out-%j.txt
container:
  image: {IMAGE}
  pull: never
  command: [sh, -c, 'echo "GPUS $NVIDIA_VISIBLE_DEVICES {CDI_GPUS}"; {RANK_LINE}; exec sleep 600']
"""


def submit_two_node_job(sb: Sandbox, workdir: Path) -> str:
    return submit_spec(sb, workdir, SPEC)


def running_per_node(api: Any, job: str, out: Path) -> list[dict[str, Any]]:
    """The job's running containers, once there is one per node; the job's output in
    the error when they do not come."""
    running_ = lambda: [c for c in job_containers(api, job) if c["State"] == "running"]  # noqa: E731
    try:
        found: list[dict[str, Any]] = wait(
            "a container on each node", lambda: len(running_()) == NODES and running_()
        )
    except AssertionError as exc:
        shown = out.read_text() if out.exists() else "(no file)"
        raise AssertionError(f"{exc}; {out}:\n{shown}") from None
    return found


def state(sb: Sandbox, job: str) -> str:
    out = sb.run_slurm(["scontrol", "-o", "show", "job", job], check=False).stdout
    return next((f[9:] for f in out.split() if f.startswith("JobState=")), "")


def slurms_gpus(sb: Sandbox, job: str) -> dict[str, set[str]]:
    """node -> the UUIDs of the GPUs Slurm gave the job there (scontrol -d's indices,
    looked up in that node's own inventory)."""
    from acbslurm.slurm.jobparse import parse_job_gpus

    shown = sb.run_slurm(["scontrol", "-d", "-o", "show", "job", job]).stdout
    inventory = {n: {g.index: g.uuid for g in gpus} for n, gpus in sb_gpus(sb).items()}
    out: dict[str, set[str]] = {}
    for g in parse_job_gpus(shown)[job].gpus:
        out.setdefault(g.node, set()).add(inventory[g.node][g.index])
    return out


def sb_gpus(sb: Sandbox) -> dict[str, Any]:
    from acbslurm.sandbox import gpus

    return gpus.by_node(sb.layout, sb.params)


def record(sb: Sandbox, node: str, job: str) -> Path:
    return sb.layout.records / node / f"{job}.json"


def test_each_node_has_its_own_slurmd_and_gpus(two: Sandbox) -> None:
    sb = two
    nodes = sb.params.node_names
    assert len(nodes) == NODES
    status = {s.name: s for s in sb.status()}
    for node in nodes:
        assert status[f"slurmd-{node}"].ready, status[f"slurmd-{node}"]
    # One munged per node: the second node's own (see Layout.node_munge_socket).
    assert all(status[f"munged-{n}"].ready for n in nodes[1:]), status
    shown = sb.run_slurm(["sinfo", "-h", "-N", "-p", "p1", "-o", "%N %G"]).stdout.split("\n")
    assert sorted(ln.strip() for ln in shown if ln.strip()) == [f"{n} gpu:{GPUS}" for n in nodes]
    uuids = [g.uuid for gpus in sb_gpus(sb).values() for g in gpus]
    assert len(uuids) == len(set(uuids)) == NODES * GPUS  # no two nodes share a GPU


def test_a_two_node_job_gets_each_nodes_own_gpus_and_leaves_nothing(
    two: Sandbox, workdir: Path
) -> None:
    sb = two
    api = docker_api(sb)
    job = submit_two_node_job(sb, workdir)
    try:
        wait(f"job {job} running", lambda: state(sb, job) == "RUNNING")
        given = slurms_gpus(sb, job)
        assert sorted(given) == sb.params.node_names
        assert all(len(u) == GPUS for u in given.values()), given
        _each_node_recorded_and_got_its_own(sb, api, job, given, workdir)
        _status_shows_both_nodes(sb, job, given)
    finally:
        res = as_user(sb, "user1", "cancel", job)
    assert res.returncode == 0, res.stderr
    wait(f"job {job} ended", lambda: state(sb, job) in ENDED)
    _each_epilog_cleaned_up(sb, api, job)
    _report_shows_the_job_to_its_user_only(sb, job, given)


def _each_node_recorded_and_got_its_own(
    sb: Sandbox, api: Any, job: str, given: dict[str, set[str]], workdir: Path
) -> None:
    # Each node's prolog recorded its own node's GPUs, in its own directory.
    for node, uuids in given.items():
        wait(f"record on {node}", record(sb, node, job).exists)
        rec = json.loads(record(sb, node, job).read_text())
        assert (rec["node"], {g["uuid"] for g in rec["gpus"]}) == (node, uuids)
        # The prolog makes the job's private directory after the record: both by its end.
        wait(f"the job's directory on {node}", (sb.layout.run / "job" / node / job).is_dir)
    # One container per node, each handed exactly its node's GPUs.
    out = workdir / f"out-{job}.txt"
    containers = running_per_node(api, job, out)
    seen = hook_devices(sb)
    got = sorted(sorted(seen[c["Id"]]) for c in containers)
    assert got == sorted(sorted(u) for u in given.values())
    # What each container printed: its node's GPUs, each line once (an attach with
    # logs=1 replayed a line it also streamed: printed twice in 2 of 16 runs).

    def printed() -> list[list[str]]:
        text = out.read_text() if out.exists() else ""
        lines = [ln for ln in text.splitlines() if ln.startswith("GPUS ")]
        # --gpus: NVIDIA_VISIBLE_DEVICES; CDI: void, and the spec's per-GPU variables.
        fields = [ln.split() for ln in lines]
        given = [f[2] if f[1] == "void" and len(f) > 2 else f[1] for f in fields]
        return sorted(sorted(filter(None, g.split(","))) for g in given)

    try:
        wait("both containers' output", lambda: len(printed()) == NODES)
    except AssertionError as exc:
        shown = out.read_text() if out.exists() else "(no file)"
        raise AssertionError(f"{exc}; {out}:\n{shown}") from None
    assert printed() == got
    _each_rank_knows_the_job(job, out.read_text(), sb.params.node_names)
    # The sandbox's daemons keep their containers in rootlesskit's network, not the
    # node's: rank 0 says so once for the step (the ranks cannot reach each other).
    said = out.read_text().count("acbslurm: this step spans 2 nodes, but its containers")
    assert said == 1, out.read_text()


def _each_rank_knows_the_job(job: str, text: str, nodes: list[str]) -> None:
    """Each container has its rank, the job's nodes and one rendezvous: the first node,
    one port, as torch.distributed's env:// reads them."""
    from acbslurm.container.job_env import rendezvous_port
    from acbslurm.slurm.hostlist import expand_hostlist

    ranks = sorted(ln.split()[1:] for ln in text.splitlines() if ln.startswith("RANK "))
    assert len(ranks) == NODES, text
    port = str(rendezvous_port(job))
    for i, r in enumerate(ranks):
        rank, world, local, local_world, addr, mport, nodelist, nnodes, node_id, node = r
        assert (rank, world, local, local_world) == (str(i), str(NODES), "0", "1"), r
        assert (addr, mport, nnodes, node_id) == (nodes[0], port, str(NODES), str(i)), r
        assert expand_hostlist(nodelist) == nodes and node == nodes[i], r


def _status_shows_both_nodes(sb: Sandbox, job: str, given: dict[str, set[str]]) -> None:
    """`acbslurm status` as user1: both nodes, each with its GPUs and their UUIDs."""
    res = as_user(sb, "user1", "status", "--json", job)
    assert res.returncode == 0, res.stderr
    (row,) = json.loads(res.stdout)["jobs"]
    assert _by_node(row["gpu_devices"]) == given
    text = as_user(sb, "user1", "status", job).stdout
    assert all(f"{n}:0,1" in text for n in sb.params.node_names), text
    gpus_view = json.loads(as_user(sb, "user1", "status", "--gpus", "--json").stdout)["gpus"]
    assert {(g["node"], g["uuid"]) for g in gpus_view if g["job_id"] == job} == {
        (n, u) for n, uuids in given.items() for u in uuids
    }


def _by_node(devices: list[dict[str, Any]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for d in devices:
        out.setdefault(d["node"], set()).add(d["uuid"])
    return out


def _each_epilog_cleaned_up(sb: Sandbox, api: Any, job: str) -> None:
    """No container, record or job directory is left; both nodes idle, neither drained."""
    from acbslurm.sandbox.slurm import node_states

    wait("the job's containers removed", lambda: job_containers(api, job) == [])
    for node in sb.params.node_names:
        wait(f"record on {node} removed", lambda n=node: not record(sb, n, job).exists())
        jobdir = sb.layout.run / "job" / node / job
        wait(f"job dir on {node} removed", lambda d=jobdir: not d.exists())
    wait("both nodes idle", lambda: set(node_states(sb.layout).values()) == {"idle"})


def _report_shows_the_job_to_its_user_only(
    sb: Sandbox, job: str, given: dict[str, set[str]]
) -> None:
    """user1 sees the job with 4 GPUs and each node's devices; user2 does not see it."""

    def reported() -> Any:
        res = as_user(sb, "user1", "report", "--json", "--start", "now-1h")
        assert res.returncode == 0, res.stderr
        rows = {str(j["job_id_raw"]): j for j in json.loads(res.stdout)["jobs"]}
        got = rows.get(job)
        return got if got and got["state"] in ENDED and got["gpu_devices"] else None

    row = wait(f"job {job} in the report", reported, 90)
    assert row["gpus"] == NODES * GPUS
    assert _by_node(row["gpu_devices"]) == given
    # Each node's epilog kept its own devices in the job's SystemComment (where jobstats
    # does not write), neither node's write dropping the other's (hooks/usage.py).
    argv = ["sacct", "-X", "-n", "-P", "-j", job, "-o", "SystemComment"]

    def kept() -> set[str]:
        words = sb.run_slurm(argv).stdout.lower().split()
        return {n for n in sb.params.node_names if f"acbslurm:gpus={n}:".lower() in str(words)}

    wait("both nodes' devices in the SystemComment", lambda: kept() == set(given), 60)
    res = as_user(sb, "user2", "report", "--json", "--start", "now-1h")
    assert res.returncode == 0, res.stderr
    assert job not in {str(j["job_id_raw"]) for j in json.loads(res.stdout)["jobs"]}


def test_a_killed_dockerd_is_swept_on_both_nodes(two: Sandbox, workdir: Path) -> None:
    """The user's dockerd dies while the job's containers run on both nodes: each
    node's epilog kills its container processes without Docker, no node drains, and the
    next job's prologs remove the exited containers once the daemon is back."""
    sb = two
    api = docker_api(sb)
    job = submit_two_node_job(sb, workdir)
    wait(f"job {job} running", lambda: state(sb, job) == "RUNNING")
    out = workdir / f"out-{job}.txt"
    containers = running_per_node(api, job, out)
    pids = [int(api.inspect_container(c["Id"])["State"]["Pid"]) for c in containers]
    os.kill(dockerd_pid(sb), signal.SIGKILL)
    try:
        sb.run_slurm(["scancel", job])
        wait(f"job {job} ended", lambda: state(sb, job) in ENDED)
        for pid in pids:
            wait(f"container process {pid} ends", lambda p=pid: not running(p), 30)
        wait(
            f"job {job} to leave the queue",
            lambda: not sb.run_slurm(["squeue", "-h", "-j", job], check=False).stdout.strip(),
        )
        from acbslurm.sandbox.slurm import node_states

        states = node_states(sb.layout)
        assert not any("drain" in s for s in states.values()), states
        # Each node noted the job for the next sweep, in its own record directory.
        for node in sb.params.node_names:
            unswept = sb.layout.records / node / "unswept" / str(sb.uid)
            assert job in unswept.read_text().split()
    finally:
        sb.restart(f"dockerd-{sb.user}")
    api = docker_api(sb)
    assert len(job_containers(api, job)) == NODES  # exited, left in the daemon's state
    nxt = as_user(sb, "user1", "submit", "--json", "--wait", str(_true_spec(workdir)), cwd=workdir)
    assert nxt.returncode == 0, nxt.stderr
    assert job_containers(api, job) == []
    for node in sb.params.node_names:
        assert not (sb.layout.records / node / "unswept" / str(sb.uid)).exists()


def _true_spec(workdir: Path) -> Path:
    """A 2-node job without containers: its prolog on each node runs the sweep."""
    spec = workdir / "true.yaml"
    spec.write_text(
        f"name: sweep\npartition: p1\nnodes: {NODES}\nntasks_per_node: 1\ngpus: 1\n"
        'mem: 100M\ntime: "2"\noutput: out-%j.txt\ncommand: ["true"]\n'
    )
    spec.chmod(0o644)
    return spec
