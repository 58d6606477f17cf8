"""status and doctor on the real Slurm, driven as user1: a requeued job's reason once it
COMPLETED, array tasks' order and GPUs, a drained node in `status --gpus` and in the
doctor, and the sandbox passing its own doctor. States are waited for, never slept on."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sandboxtest import (
    ACBSLURM,
    REPO,
    RERUN_WAIT,
    acbslurm_as,
    job_fields,
    no_jobs,
    wait_job,
    wait_until,
)

from acbslurm import proc
from acbslurm.slurm.jobparse import job_order

pytestmark = pytest.mark.integration


def sbatch(sb: Any, *args: str) -> str:
    res = sb.run_as_user(["sbatch", "--parsable", "-o", "/dev/null", *args])
    return str(res.stdout.strip().split(";")[0])


def status_json(sb: Any, *args: str) -> list[dict[str, Any]]:
    res = acbslurm_as(sb, "user1", "status", "--json", *args)
    assert res.stdout.startswith("{"), res.stdout + res.stderr
    jobs: list[dict[str, Any]] = json.loads(res.stdout)["jobs"]
    return jobs


def test_a_requeued_job_that_completed_shows_no_begin_time(sb: Any, idle: Any) -> None:
    jid = sbatch(sb, "--gres=gpu:1", "--requeue", "--wrap", "sleep 3")
    wait_job(sb, jid, ("RUNNING",), 60)
    sb.run_slurm(["scontrol", "requeue", jid])
    # What the requeue gives it, once the scheduler has looked at it again.
    wait_until(
        f"job {jid} pending for BeginTime",
        lambda: job_fields(sb, jid).get("Reason") == "BeginTime",
        timeout=60,
    )
    # It starts again once eligible (the sandbox's cred_expire after the requeue).
    done = wait_job(sb, jid, ("COMPLETED",), RERUN_WAIT)
    raw = sb.run_slurm(["squeue", "-h", "-t", "all", "-o", "%r", f"--jobs={jid}"]).stdout
    print(f"Slurm's own reason for the completed job: scontrol {done.get('Reason')}, squeue {raw}")
    (job,) = status_json(sb, jid)
    assert job["state"] == "COMPLETED", job
    assert job["reason"] is None, job  # not the stale BeginTime
    table = acbslurm_as(sb, "user1", "status", jid).stdout.splitlines()
    assert table[1].split()[3:5] == ["COMPLETED", "-"], table


def test_a_running_jobs_gpus_come_with_the_one_squeue(sb: Any, idle: Any) -> None:
    """`status` asks the controller once: a running job's GPUs and their UUIDs come
    with squeue's row, from the AdminComment the job's prolog wrote; scontrol is not
    run (here it fails, and would leave the job without GPUs)."""
    import shutil
    import tempfile

    jid = sbatch(sb, "--gres=gpu:1", "--wrap", "sleep 120")
    fields = wait_until(
        f"job {jid} running with its GPUs recorded",
        lambda: (
            (f := job_fields(sb, jid)).get("JobState") == "RUNNING"
            and "acbslurm:gpus=" in f.get("AdminComment", "")
            and f
        ),
        timeout=60,
    )
    token = fields["AdminComment"].split("acbslurm:gpus=", 1)[1].split()[0]
    node_index, _, uuid = token.partition("=")
    real = shutil.which("squeue", path=sb.user_env("user1")["PATH"])
    assert real, "no squeue on the sandbox's PATH"
    bin_dir = tempfile.mkdtemp(prefix="acbslurm-squeue-only-")
    try:
        os.chmod(bin_dir, 0o755)
        os.symlink(real, os.path.join(bin_dir, "squeue"))
        fake = os.path.join(bin_dir, "scontrol")
        Path(fake).write_text('#!/bin/sh\necho "scontrol must not run: $*" >&2\nexit 1\n')
        os.chmod(fake, 0o755)
        extra = {"PYTHONPATH": str(REPO), "ACBSLURM_SLURM_BIN_DIR": bin_dir}
        for args in ((jid,), ()):
            res = sb.run_as(
                "user1", [*ACBSLURM, "status", "--json", *args], extra_env=extra, check=False
            )
            assert res.returncode == 0, res.stdout + res.stderr
            (job,) = [j for j in json.loads(res.stdout)["jobs"] if j["job_id"] == jid]
            assert job["state"] == "RUNNING", job
            assert job["gpu_indices"] == [int(node_index.rpartition(":")[2])], (job, token)
            assert job["gpu_uuids"] == [uuid], (job, token)
    finally:
        shutil.rmtree(bin_dir)


def test_array_tasks_in_one_order_each_running_one_with_its_gpu(sb: Any, idle: Any) -> None:
    # 12 one-GPU tasks of a second each on 2 GPUs: tasks start and end all the time,
    # and 10, 11 come after 2 only when sorted as numbers.
    aid = sbatch(sb, "--gres=gpu:1", "--array=0-11", "--wrap", "sleep 1")
    seen_running = 0
    orders: list[tuple[str, list[str]]] = []

    def check() -> bool:
        nonlocal seen_running
        for args in ((), (aid,)):
            jobs = [j for j in status_json(sb, *args) if j["job_id"].startswith(aid + "_")]
            ids = [j["job_id"] for j in jobs]
            assert ids == sorted(ids, key=job_order), (args, ids)
            orders.append((" ".join(args), ids))
            for j in jobs:
                if j["state"] == "RUNNING":
                    seen_running += 1
                    assert j["gpu_indices"], (args, j)  # never RUNNING without its GPU
        return not [j for j in status_json(sb, aid) if j["state"] not in ("COMPLETED",)]

    wait_until(f"array {aid} to complete", check, timeout=180)
    assert seen_running, orders
    final = [j["job_id"] for j in status_json(sb, aid)]
    assert final == [f"{aid}_{i}" for i in range(12)], final


@pytest.fixture
def drained(sb: Any) -> Iterator[str]:
    """The sandbox's node drained as slurmd drains it after a failed prolog."""
    no_jobs(sb)
    node = sb.params.node
    sb.run_slurm(["scontrol", "update", f"nodename={node}", "state=drain", "reason=Prolog error"])
    try:
        wait_until("the node to drain", lambda: "DRAIN" in _node_state(sb, node), timeout=30)
        yield node
    finally:
        sb.run_slurm(["scontrol", "update", f"nodename={node}", "state=resume"])
        wait_until("the node to resume", lambda: "DRAIN" not in _node_state(sb, node), 30)


def _node_state(sb: Any, node: str) -> str:
    out = sb.run_slurm(["scontrol", "-o", "show", "node", node]).stdout
    return next((w.split("=", 1)[1] for w in out.split() if w.startswith("State=")), "")


def _doctor(sb: Any, *args: str) -> dict[str, dict[str, Any]]:
    """The doctor as root on the sandbox's own settings (the sandbox's environment)."""
    env = {**os.environ, **sb.env(), "PYTHONPATH": str(REPO)}
    env["ACBSLURM_CONFIG"] = str(sb.layout.acbslurm_conf)
    env["SLURM_CONF"] = str(sb.layout.slurm_conf)
    r = proc.run(
        [sys.executable, "-m", "acbslurm", "doctor", "--json", *args],
        env=env,
        check=False,
        timeout=90,
    )
    assert r.stdout.startswith("{"), r.stdout + r.stderr
    return {c["name"]: c for c in json.loads(r.stdout)["checks"]}


def test_a_drained_node_in_status_gpus_and_in_the_doctor(sb: Any, drained: str) -> None:
    view = json.loads(acbslurm_as(sb, "user1", "status", "--gpus", "--json").stdout)["gpus"]
    assert len(view) == 2 and all(g["unavailable"] == "drained" for g in view), view
    assert all(g["node_reason"].startswith("Prolog error") for g in view), view
    table = acbslurm_as(sb, "user1", "status", "--gpus").stdout.splitlines()
    assert all(" free " not in line for line in table) and "drained" in table[1], table
    checks = _doctor(sb, "--user", sb.user)
    c = checks["node-state"]
    assert c["status"] == "fail" and "the acbslurm prolog failed" in c["summary"], c
    assert f"scontrol update nodename={drained} state=resume" in c["fix"], c


def test_the_sandbox_passes_its_own_doctor(sb: Any, idle: Any) -> None:
    checks = _doctor(sb, "--user", sb.user)
    failed = {n: c["summary"] for n, c in checks.items() if c["status"] == "fail"}
    assert not failed, failed
    assert checks["kill-wait"]["status"] == "ok", checks["kill-wait"]  # KillWait=10 > 5
    assert checks["cgroups"]["status"] == "ok", checks["cgroups"]  # configured like a GPU site
    assert checks["node-state"]["status"] == "ok", checks["node-state"]
    # As root without --user: the daemon checks are skipped alike, none fails.
    root = _doctor(sb)
    assert root["nvidia-hook"]["status"] == root["dockerd"]["status"] == "skip", root
    assert not [n for n, c in root.items() if c["status"] == "fail"], root


def test_root_for_user1_names_user1s_uid_when_the_daemon_is_away(sb: Any, tmp_path: Path) -> None:
    settings = json.loads(sb.layout.acbslurm_conf.read_text())
    settings["docker_host"] = f"unix://{tmp_path}/nobody/{{user}}/docker.sock"
    conf = tmp_path / "acbslurm.yaml"
    conf.write_text(json.dumps(settings))
    env = {**os.environ, **sb.env(), "PYTHONPATH": str(REPO), "ACBSLURM_CONFIG": str(conf)}
    env["SLURM_CONF"] = str(sb.layout.slurm_conf)
    r = proc.run(
        [sys.executable, "-m", "acbslurm", "doctor", "--json", "--user", sb.user],
        env=env,
        check=False,
        timeout=90,
    )
    checks = {c["name"]: c for c in json.loads(r.stdout)["checks"]}
    fix = checks["dockerd"]["fix"]
    assert f"for {sb.user} (uid {sb.uid})" in fix and "uid 0" not in fix, fix
    # nvidia-hook: this node's daemon for user1 is not there; user1's real one (at the
    # sandbox's socket) is another daemon and must not be taken for it.
    hook = checks["nvidia-hook"]
    assert f"no running dockerd of {sb.user} at {tmp_path}/nobody" in hook["summary"], hook


def test_two_nodes_on_this_host_ask_for_the_node_option(two: Any) -> None:
    checks = _doctor(two, "--user", two.user)
    g = checks["gres"]
    assert g["status"] == "fail" and "several nodes share this host" in g["summary"], g
    assert "--node NAME" in g["fix"] and "gres.conf" not in g["fix"], g
    node = two.params.node_names[1]
    checks = _doctor(two, "--user", two.user, "--node", node)
    assert checks["gres"]["status"] == "ok", checks["gres"]
    assert checks["node-state"]["status"] == "ok", checks["node-state"]
