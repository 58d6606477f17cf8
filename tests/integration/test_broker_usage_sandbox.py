"""A job that shares its GPUs through its broker (docs/broker.md, "Inside Slurm"): after
the job, `acbslurm report` shows user1 its allocated GPU-seconds, those its broker's
clients held (per program) and the idle rest; user2 sees none of it (docs/serve.md,
*Usage*)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sandboxtest import (
    acbslurm_as,
    broker_program,
    broker_start,
    submit,
    wait_for_pool_usage,
    wait_gone,
)

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
