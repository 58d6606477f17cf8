"""What a job's container learns of the job (container/job_env.py)."""

from __future__ import annotations

import pytest

from acbslurm.container.job_env import job_env, rendezvous_port, tasks_on_node
from acbslurm.slurm.hostlist import first_host

# A task of `srun -N2 --ntasks-per-node=2` on vm-[1-2], rank 3, as slurmstepd sets it.
TASK = {
    "SLURM_JOB_ID": "6817042",
    "SLURM_JOB_NODELIST": "vm-[1-2]",
    "SLURM_JOB_NUM_NODES": "2",
    "SLURM_NNODES": "2",
    "SLURM_NTASKS": "4",
    "SLURM_RESTART_COUNT": "1",
    "SLURM_STEP_ID": "0",
    "SLURM_STEP_NODELIST": "vm-[1-2]",
    "SLURM_STEP_NUM_TASKS": "4",
    "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
    "SLURM_PROCID": "3",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "1",
    "SLURMD_NODENAME": "vm-2",
    "SLURM_CONF": "/etc/slurm/slurm.conf",
    "HOME": "/home/user1",
    "PATH": "/usr/bin",
}


def test_a_task_gets_slurms_variables_and_the_rendezvous() -> None:
    got = job_env(TASK, {})
    for k in ("SLURM_JOB_NODELIST", "SLURM_NNODES", "SLURM_RESTART_COUNT", "SLURMD_NODENAME"):
        assert got[k] == TASK[k]
    assert "SLURM_CONF" not in got and "HOME" not in got and "PATH" not in got
    assert {k: got[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")} == {
        "RANK": "3",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
    }
    assert got["MASTER_ADDR"] == "vm-1"
    assert got["MASTER_PORT"] == str(rendezvous_port("6817042"))
    assert 10000 <= int(got["MASTER_PORT"]) < 32768  # below the ephemeral range


def test_the_users_values_win() -> None:
    got = job_env(TASK, {"MASTER_PORT": "29500", "SLURM_LOCALID": "7", "X": "y"})
    assert (got["MASTER_PORT"], got["SLURM_LOCALID"], got["X"]) == ("29500", "7", "y")


def test_the_batch_step_gets_no_rendezvous() -> None:
    """Outside srun (no step id): no rank to derive, only the job's variables."""
    batch = {k: v for k, v in TASK.items() if not k.startswith("SLURM_STEP")}
    got = job_env(batch, {})
    assert "RANK" not in got and "MASTER_ADDR" not in got
    assert got["SLURM_JOB_NODELIST"] == "vm-[1-2]"


@pytest.mark.parametrize(
    ("per_node", "node", "want"),
    [
        ("2(x2)", 1, 2),
        ("3,1", 1, 1),
        ("2(x3),1", 3, 1),
        ("4", 0, 4),
        ("4", 1, None),
        ("x", 0, None),
    ],
)
def test_tasks_on_node(per_node: str, node: int, want: int | None) -> None:
    assert tasks_on_node(per_node, node) == want


@pytest.mark.parametrize(
    ("expr", "want"),
    [
        ("vm-[1-2]", "vm-1"),
        ("gpu[07-12,01],login", "gpu07"),
        ("rack[2-3]-n[05-09]", "rack2-n05"),
        ("node1", "node1"),
        ("a,b", "a"),
    ],
)
def test_first_host(expr: str, want: str) -> None:
    assert first_host(expr) == want


def test_the_node_network_names_the_nodes_interface_for_gloo_and_nccl(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import socket

    from acbslurm.container import job_env as je

    # This node's name resolves to this machine's loopback here: the interface is
    # found (lo), and refused, since no other node reaches it there.
    asked: list[str] = []

    def resolve(name: str, *_: object) -> list[tuple[object, ...]]:
        asked.append(name)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 0))]

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    assert je.interface_of("127.0.0.1") == "lo"
    assert job_env(TASK, {}, host_network=True).keys() == job_env(TASK, {}).keys()
    assert asked == ["vm-2"]
    # An interface holding the node's address: both variables name it; the user's win.
    monkeypatch.setattr(je, "interface_of", lambda addr: "ib0" if addr == "127.0.0.1" else None)
    got = job_env(TASK, {"NCCL_SOCKET_IFNAME": "eth1"}, host_network=True)
    assert (got["GLOO_SOCKET_IFNAME"], got["NCCL_SOCKET_IFNAME"]) == ("ib0", "eth1")
    # Not without the node's network, not for a step on one node, not for a bad count.
    assert "GLOO_SOCKET_IFNAME" not in job_env(TASK, {})
    one = {**TASK, "SLURM_NNODES": "1"}
    assert "GLOO_SOCKET_IFNAME" not in job_env(one, {}, host_network=True)
    odd = {**TASK, "SLURM_NNODES": "2x"}
    assert "GLOO_SOCKET_IFNAME" not in job_env(odd, {}, host_network=True)


def test_an_unknown_node_name_gives_no_interface(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    def fail(*_: object) -> list[object]:
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", fail)
    assert "GLOO_SOCKET_IFNAME" not in job_env(TASK, {}, host_network=True)
