"""`submit -n N` when sbatch starts failing midway: every submitted id is printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fake_slurm import FakeSlurm

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def failing_sbatch(fake_slurm: FakeSlurm, tmp_path: Path) -> dict[str, str]:
    """sbatch hands out ids 100, 101... and fails from its 6th call on."""
    fake_slurm.respond(
        "sbatch",
        stderr="sbatch: error: Batch job submission failed: Socket timed out\n",
        rc=1,
        after=5,
    )
    (tmp_path / "job.yaml").write_text('name: t\ncommand: ["true"]\n')
    return dict(os.environ, PYTHONPATH=str(ROOT))  # PATH: the fake's bin first


def _submit(env: dict[str, str], tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acbslurm", "submit", "-n", "20", *args, str(tmp_path / "job.yaml")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_partial_submission_prints_every_id_and_exits_4(
    failing_sbatch: dict[str, str], tmp_path: Path
) -> None:
    # Before: a concurrent.futures.CancelledError traceback and no ids at all.
    r = _submit(failing_sbatch, tmp_path)
    assert r.returncode == 4, r.stderr
    assert "Traceback" not in r.stderr
    ids = r.stdout.split()
    assert ids == [str(100 + n) for n in range(5)]
    assert "Submitted 5 of 20 jobs" in r.stderr and "Socket timed out" in r.stderr


def test_partial_submission_in_json(failing_sbatch: dict[str, str], tmp_path: Path) -> None:
    r = _submit(failing_sbatch, tmp_path, "--json")
    assert r.returncode == 4, r.stderr
    out = json.loads(r.stdout)
    assert out["job_ids"] == ["100", "101", "102", "103", "104"]
    assert out["requested"] == 20 and out["submitted"] == 5
    assert out["failed"] >= 1 and out["failed"] + out["not_attempted"] == 15
    assert "Socket timed out" in out["error"]
