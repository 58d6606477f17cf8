"""The node as slurmctld sees it: drained by a failed prolog, by acbslurm, by an admin."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
from fake_slurm import FakeSlurm

from acbslurm.doctor import nodes
from acbslurm.doctor.context import Context


def _ctx(make_ctx: Callable[..., Context]) -> Context:
    return make_ctx(env={"PATH": os.environ["PATH"]})  # the fake Slurm first on PATH


def test_an_idle_node_is_ok(fake_slurm: FakeSlurm, make_ctx: Callable[..., Context]) -> None:
    fake_slurm.set_cluster(nodes={"n1": "gpu:2"})
    c = nodes.check_node_state(_ctx(make_ctx))
    assert c.status == "ok" and "node n1 is IDLE" in c.summary, c


@pytest.mark.parametrize(
    ("reason", "status", "summary", "fix"),
    [
        ("Prolog error", "fail", "the acbslurm prolog failed", "scontrol release JOBID"),
        (
            "acbslurm: job 12: a container may still hold its GPUs",
            "fail",
            "acbslurm's epilog drained it",
            "docker ps -a --filter label=acbslurm.job_id=N",
        ),
        ("maintenance", "warn", "Slurm starts no job here", "state=resume"),
    ],
)
def test_a_drained_node_says_why_and_what_to_do(
    fake_slurm: FakeSlurm,
    make_ctx: Callable[..., Context],
    reason: str,
    status: str,
    summary: str,
    fix: str,
) -> None:
    fake_slurm.set_cluster(nodes={"n1": "gpu:2", "n2": "gpu:2"})
    fake_slurm.drain("n1", reason)
    c = nodes.check_node_state(_ctx(make_ctx))
    assert c.status == status, c
    assert f"node n1 is IDLE+DRAIN ({reason} [root@" in c.summary and summary in c.summary
    assert fix in c.fix and "scontrol update nodename=n1 state=resume" in c.fix


def test_a_node_slurm_does_not_know_names_the_option(
    fake_slurm: FakeSlurm, make_ctx: Callable[..., Context]
) -> None:
    fake_slurm.set_cluster(nodes={"vm-1": "gpu:2", "vm-2": "gpu:2"})
    c = nodes.check_node_state(_ctx(make_ctx))
    assert c.status == "warn" and "slurmctld has no node n1 (it has vm-1, vm-2)" in c.summary
    assert "--node NAME" in c.fix


def test_slurmctld_away_is_a_warning(
    fake_slurm: FakeSlurm, make_ctx: Callable[..., Context]
) -> None:
    fake_slurm.respond("scontrol", stderr="slurm_load_node error: Unable to contact\n", rc=1)
    c = nodes.check_node_state(_ctx(make_ctx))
    assert c.status == "warn" and "cannot ask slurmctld about node n1" in c.summary, c
