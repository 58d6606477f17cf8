"""A pool on a multi-node job's GPUs: which devices each model's gang may take (one
node for a model of one process, one node per rank for a worker group), the broker
lending every node's GPUs, and the pool's fit check."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_slurm import FakeSlurm

from acbslurm.broker.core import Device
from acbslurm.serve.errors import ServeError
from acbslurm.serve.placement import large_enough, node_plan, placeable
from acbslurm.serve.pool import load_pool_text
from acbslurm.serve.runner import check_fits, choose_broker

# squeue's facts of a sandbox two-node job (JobID ... NodeList ... AdminComment).
CAPTURED = (Path(__file__).parents[1] / "slurm/captured/two-nodes.squeue").read_text()
N1 = ["GPU-93f7abd3-c6bc-e35c-5292-2e29187ec1fd", "GPU-45fa6b49-c237-39fe-bda2-6b5b218c5c3c"]
N2 = ["GPU-bc5a62a2-7b35-e040-46e6-94cb30d49f66", "GPU-0f9f4fa7-bddd-8e38-2e52-bbd52b1a9685"]


def job_env() -> dict[str, str]:
    """The batch step of job 45 on vm-1 (its task prolog's GPUs: vm-1's)."""
    return {
        "SLURM_JOB_ID": "45",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_JOB_NODELIST": "vm-[1-2]",
        "SLURMD_NODENAME": "vm-1",
        "ACBSLURM_GPU_UUIDS": ",".join(N1),
    }


def two_nodes(mem: int = 0) -> list[Device]:
    return [Device(f"{n}g{i}", "gpu", mem, node=n) for n in ("vm-1", "vm-2") for i in range(2)]


def test_node_plan() -> None:
    nodes = [d.node for d in two_nodes()]
    order = ("vm-1", "vm-2")
    assert node_plan(2, 1, nodes, order) == (2, ())  # one process: all on one node
    assert node_plan(4, 2, nodes, order) == (2, ("vm-1", "vm-2"))  # one rank per node
    assert node_plan(4, 2, ["", "", "", ""], ()) == (0, ())  # one node: no constraint
    assert node_plan(6, 3, nodes, order) == (0, ())  # ranks would share a node
    assert placeable(4, 2, order, two_nodes(), 1)
    assert not placeable(3, 3, (), two_nodes(), 1)  # 3 on one node: never
    assert not placeable(2, 2, (), two_nodes(mem=10), 11)


def test_devices_of_unknown_size_are_taken_to_fit() -> None:
    """One rule for the pool's fit check, the worker's and placeable: a size of 0 is one
    the broker does not know (a job's GPUs without an inventory)."""
    devices = [Device("small", "gpu", 10), Device("big", "gpu", 20), Device("unknown", "gpu", 0)]
    assert [d.id for d in large_enough(devices, 15)] == ["big", "unknown"]
    assert not placeable(3, 0, (), devices, 15) and placeable(2, 0, (), devices, 15)


def test_the_pools_broker_lends_every_nodes_gpus_in_node_order(
    fake_slurm: FakeSlurm, monkeypatch: pytest.MonkeyPatch, tiny_models: dict[str, Path]
) -> None:
    monkeypatch.delenv("ACBSLURM_GPU_INVENTORY", raising=False)
    fake_slurm.respond("squeue", stdout=CAPTURED)
    a, c = tiny_models["model-a"], tiny_models["model-c"]
    pool = load_pool_text(
        f"models:\n  - {{name: a, path: {a}, devices: 2}}\n"
        f"  - {{name: c, path: {c}, devices: 4, procs: 2}}\n",
        "p.yaml",
    )
    choice = choose_broker(pool, env=job_env())
    assert choice.address == "" and choice.own is None
    assert [(d.id, d.node) for d in choice.devices] == [
        *((u, "vm-1") for u in N1),
        *((u, "vm-2") for u in N2),
    ]
    assert choice.source == "Slurm job 45 on 2 nodes: vm-1,vm-2"
    check_fits(pool, choice.devices, ("vm-1", "vm-2"))
    big = load_pool_text(f"models:\n  - {{name: a, path: {a}, devices: 3}}\n", "p.yaml")
    with pytest.raises(ServeError, match=r"p.yaml:2: model a needs 3 device\(s\) .* 3 of them on"):
        check_fits(big, choice.devices, ("vm-1", "vm-2"))


def test_this_nodes_gpus_missing_from_the_comment_is_an_error(
    fake_slurm: FakeSlurm, tiny_models: dict[str, Path]
) -> None:
    from acbslurm.errors import GpuMappingError

    fake_slurm.respond("squeue", stdout=CAPTURED)
    env = {**job_env(), "ACBSLURM_GPU_UUIDS": "GPU-elsewhere"}
    pool = load_pool_text(f"models:\n  - {{name: a, path: {tiny_models['model-a']}}}\n", "p.yaml")
    with pytest.raises(GpuMappingError, match="GPU-elsewhere are not in the job's AdminComment"):
        choose_broker(pool, env=env)


def test_a_groups_lease_is_put_in_rank_order_by_node() -> None:
    """Rank r's part of the lease is on rank r's node, whatever order the grant had;
    its first request may take only devices of its ranks' nodes."""
    from types import SimpleNamespace

    from acbslurm.serve.engines.builtin.gang import Gang

    gang = Gang(SimpleNamespace(weights=0), 2, 2, "cpu")
    three = [*two_nodes(), Device("vm-3g0", node="vm-3")]
    gang.plan([d.node for d in three], ("vm-3", "vm-1", "vm-2"))  # serving from vm-3
    assert (gang.per_node, gang.rank_nodes) == (1, ("vm-3", "vm-1"))
    assert gang.pin(three) == ["vm-1g0", "vm-1g1", "vm-3g0"]
    granted = [Device("vm-1g1", node="vm-1"), Device("vm-3g0", node="vm-3")]
    assert gang.order(granted) == ["vm-3g0", "vm-1g1"]
    assert gang.parts(gang.order(granted)) == [["vm-3g0"], ["vm-1g1"]]
    one = Gang(SimpleNamespace(weights=0), 2, 1, "cpu")
    one.plan([d.node for d in three], ("vm-3", "vm-1", "vm-2"))
    assert (one.per_node, one.rank_nodes, one.pin(three)) == (2, (), None)


def test_the_rendezvous_host_is_slurms_node_address_when_the_name_does_not_resolve(
    fake_slurm: FakeSlurm,
) -> None:
    """The sandbox's nodes are names on one host (NodeAddr=127.0.0.1), in no DNS."""
    from acbslurm.serve.placement import from_env

    fake_slurm.respond("scontrol", stdout="NodeName=vm-1 Arch=x86_64 NodeAddr=127.0.0.1 Port=1\n")
    env = {"SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "vm-[1-2]", "SLURMD_NODENAME": "vm-1"}
    assert from_env(env).host == "127.0.0.1"
    assert fake_slurm.argvs("scontrol")[-1][-3:] == ["node", "-o", "vm-1"]
    resolvable = {**env, "SLURM_JOB_NODELIST": "localhost,vm-2", "SLURMD_NODENAME": "localhost"}
    assert from_env(resolvable).host == "localhost"
