"""`container-cgroups`: where Slurm runs its cgroup plugins, a job's containers must join
the job's cgroups, or the doctor fails with the fix: without join they run with no
memory or CPU limit and no accounting while the job's own processes have both."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from acbslurm.doctor import docker
from acbslurm.doctor.context import Context


@pytest.mark.parametrize(
    ("proctrack", "task", "named"),
    [
        (
            "proctrack/cgroup",
            "task/cgroup,task/affinity",
            "ProctrackType=proctrack/cgroup, TaskPlugin=task/cgroup,task/affinity",
        ),
        ("proctrack/cgroup", "task/none", "ProctrackType=proctrack/cgroup"),
        (
            "proctrack/linuxproc",
            "task/affinity, task/cgroup",
            "TaskPlugin=task/affinity, task/cgroup",
        ),
    ],
)
def test_off_fails_where_slurm_runs_its_cgroup_plugins(
    make_ctx: Callable[..., Context], proctrack: str, task: str, named: str
) -> None:
    c = docker.check_container_cgroups(make_ctx(container_cgroups="off"), proctrack, task)
    assert c.status == "fail", c
    assert f"runs Slurm's cgroup plugins ({named})" in c.summary
    assert "memory and CPU limits" in c.summary
    for words in ("container_cgroups: join", "acbslurm install-runtime", '"runtimes"'):
        assert words in c.fix, c.fix


@pytest.mark.parametrize(
    ("proctrack", "task"),
    [("proctrack/linuxproc", "task/affinity"), ("", ""), (None, "")],
)
def test_off_warns_where_slurm_has_no_cgroups_to_join(
    make_ctx: Callable[..., Context], proctrack: str | None, task: str
) -> None:
    # Without Slurm's cgroup plugins (or without a readable slurm.conf: None) there is
    # nothing to join; the note stays, with what it takes.
    c = docker.check_container_cgroups(make_ctx(container_cgroups="off"), proctrack, task)
    assert c.status == "warn", c
    assert "outside its cgroups" in c.summary and "container_cgroups: join" in c.fix


def test_a_value_neither_join_nor_off_fails_quoting_it(make_ctx: Callable[..., Context]) -> None:
    # The hooks join only on "join": a "Join" or "yes" would be off without a word.
    for value in ("Join", "yes"):
        c = docker.check_container_cgroups(make_ctx(container_cgroups=value), None)
        assert c.status == "fail" and f"{value!r} is neither join nor off" in c.summary, c
        assert "container_cgroups: join" in c.fix


def test_join_without_slurms_cgroups_fails(make_ctx: Callable[..., Context]) -> None:
    c = docker.check_container_cgroups(make_ctx(container_cgroups="join"), "proctrack/linuxproc")
    assert c.status == "fail" and "every container start would fail" in c.summary, c
    # Root has no daemon of its own to look into: the runtime is checked with --user.
    c = docker.check_container_cgroups(
        make_ctx(uid=0, user="root", container_cgroups="join"), "proctrack/cgroup"
    )
    assert c.status == "skip", c


def test_the_command_fails_for_a_node_with_slurms_cgroups_and_containment_off(
    node: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`acbslurm doctor` exits 1 for that node, the check and its fix in the text and the
    JSON; with join the check passes on to the user's daemon (none for root)."""
    from acbslurm.cli.doctor import doctor

    with (node / "slurm.conf").open("a") as f:
        f.write("ProctrackType=proctrack/cgroup\nTaskPlugin=task/cgroup,task/affinity\n")
    settings = {
        "gpu_inventory": str(node / "gpus.json"),
        "gres_conf": str(node / "gres.conf"),
        "record_dir": str(node / "jobs"),
        "container_cgroups": "off",
    }
    conf = node / "acbslurm.yaml"
    conf.write_text(json.dumps(settings))
    monkeypatch.setenv("ACBSLURM_CONFIG", str(conf))
    monkeypatch.setenv("SLURM_CONF", str(node / "slurm.conf"))
    monkeypatch.setenv("SLURMD_NODENAME", "n1")
    r = CliRunner().invoke(doctor, ["--json", "--user", "root"])
    assert r.exit_code == 1, r.output
    check = {c["name"]: c for c in json.loads(r.output)["checks"]}["container-cgroups"]
    assert check["status"] == "fail" and "install-runtime" in check["fix"], check
    text = CliRunner().invoke(doctor, ["--user", "root"]).output
    assert "FAIL  container-cgroups" in text and "fix: set container_cgroups: join" in text
    conf.write_text(json.dumps({**settings, "container_cgroups": "join"}))
    r = CliRunner().invoke(doctor, ["--json", "--user", "root"])
    check = {c["name"]: c for c in json.loads(r.output)["checks"]}["container-cgroups"]
    assert check["status"] == "skip", check
