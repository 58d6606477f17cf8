"""A job that shares its GPUs through its broker (docs/broker.md, "Inside Slurm"): after
the job, `acbslurm report` shows user1 its allocated GPU-seconds, those its broker's
clients held (per program) and the idle rest; user2 sees none of it (docs/serve.md,
*Usage*)."""

from __future__ import annotations

import base64
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sandboxtest import (
    REPO,
    acbslurm_as,
    broker_program,
    broker_start,
    submit,
    wait_for_pool_usage,
    wait_gone,
)

from acbslurm.config import load_settings

pytestmark = pytest.mark.integration


def test_a_broker_jobs_gpu_seconds_per_program_in_the_report(idle: Any, scripts: Path) -> None:
    # One program of the job takes both GPUs for about 2 s, then another one for 1 s.
    body = f"""
{broker_start(f"{scripts}/broker-$SLURM_JOB_ID.err")}
{broker_program("train", 2, 2)}
{broker_program("eval", 1, 1)}
kill %1; wait
"""
    job = submit(idle, scripts, body, "--gres=gpu:2", "-t", "5")
    wait_gone(idle, job, 120)

    got = wait_for_pool_usage(idle, job)
    held = {u["key"]: u["gpu_seconds"] for u in got["usage"]}
    assert set(held) == {"train", "eval"}, got
    assert 4.0 <= held["train"] < 4.0 + 3, held  # 2 GPUs x 2 s, plus the calls' time
    assert 1.0 <= held["eval"] < 1.0 + 2, held
    assert got["leased_gpu_seconds"] == pytest.approx(sum(held.values()), abs=0.01)
    assert got["leased_gpu_seconds"] <= got["allocated_gpu_seconds"]
    # user2 sees nothing of user1's job: of other users' pools only rows named user2
    # (test_serve_job_sandbox's pool has such a key), never this job's programs.
    res = acbslurm_as(idle, "user2", "report", "--by", "key", "--json", "--start", "now-1h")
    assert res.returncode == 0, res.stderr
    assert {r["key"] for r in json.loads(res.stdout)["keys"]} <= {"user2"}, res.stdout


def _jobstats_blob() -> str:
    """What jobstats' `jobstats -f -b J` prints: its summary, gzipped, in base64."""
    summary = {"gpus": 2, "nodes": {"vm": {"cpus": 1, "gpu_utilization": {"0": 0.0}}}}
    return base64.b64encode(gzip.compress(json.dumps(summary).encode())).decode()


def _admin_comment(sb: Any, job: str) -> str:
    out = sb.run_slurm(["sacct", "-X", "-n", "-P", "-j", job, "-o", "AdminComment"]).stdout
    return str(out.strip())


def _report_row(sb: Any, job: str) -> dict[str, Any]:
    res = acbslurm_as(sb, "user1", "report", "--json", "--start", "now-1h")
    assert res.returncode == 0, res.stderr
    (row,) = [j for j in json.loads(res.stdout)["jobs"] if j["job_id"] == job]
    return dict(row)


def test_the_record_survives_jobstats_and_jobstats_blob_survives_acbslurm(
    idle: Any, scripts: Path
) -> None:
    """Princeton jobstats' slurmctld epilog replaces the ended job's whole AdminComment
    (`sacctmgr -i update job where jobid=J set AdminComment=JS1:<blob>`): the report
    still shows the job's devices and its broker's usage (they are in its SystemComment,
    docs/design.md), and acbslurm writing after it (a sender's retry) keeps the blob."""
    body = f"""
{broker_start(f"{scripts}/broker-js-$SLURM_JOB_ID.err")}
{broker_program("train", 1, 1)}
kill %1; wait
"""
    job = submit(idle, scripts, body, "--gres=gpu:2", "-t", "5")
    wait_gone(idle, job, 120)
    wait_for_pool_usage(idle, job)
    before = _report_row(idle, job)
    assert [d["uuid"][:4] for d in before["gpu_devices"]] == ["GPU-", "GPU-"], before

    # jobstats' own command, as its slurmctld epilog runs it (as root)
    blob = f"JS1:{_jobstats_blob()}"
    argv = ["sacctmgr", "-i", "update", "job", "where", f"jobid={job}", "set"]
    idle.run_slurm([*argv, f"AdminComment={blob}"])
    stored = _admin_comment(idle, job)
    assert stored.lower() == blob.lower()  # Debian's sacctmgr 22.05 lowercases it
    after = _report_row(idle, job)
    assert after["gpu_devices"] == before["gpu_devices"]
    assert after["pool"] == before["pool"] and after["pool"]["usage"], after

    # jobstats first, acbslurm after (the node's sender had not sent it yet): as if
    # the epilog's words had not reached slurmdbd, then its sender's retry
    idle.run_slurm([*argv, "SystemComment="])
    assert _report_row(idle, job)["gpu_devices"] == []
    settings = load_settings(str(idle.layout.acbslurm_conf))
    pending = Path(settings.record_dir, "usage-pending")
    gpus = "acbslurm:gpus=" + ",".join(
        f"{d['node']}:{d['index']}={d['uuid']}" for d in before["gpu_devices"]
    )
    (pending / f"{job}.vm.json").write_text(
        json.dumps({"job_id": job, "node": "vm", "gpus": gpus, "lost": 0, "totals": None})
    )
    send = "from acbslurm.hooks.epilog import history_sender_main as m; m()"
    env = {**os.environ, **idle.env(), "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-c", send], env=env, check=True, timeout=60)
    assert not (pending / f"{job}.vm.json").exists()
    assert _admin_comment(idle, job) == stored
    assert _report_row(idle, job)["gpu_devices"] == before["gpu_devices"]

    # A user cannot forge the record: slurmdbd refuses them the SystemComment.
    forged = "SystemComment=acbslurm:gpus=vm:0=GPU-forged"
    res = idle.run_as("user1", [*argv, forged], check=False, timeout=30)
    assert res.returncode != 0, res.stdout
    assert _report_row(idle, job)["gpu_devices"] == before["gpu_devices"]
