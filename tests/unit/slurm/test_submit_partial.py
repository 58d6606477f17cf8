"""`submit -n N` when sbatch starts failing midway: every submitted id is printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

# sbatch that hands out ids 1001, 1002... and fails from its 6th call on.
SBATCH = """#!{python}
import fcntl, sys
sys.stdin.read()
with open({counter!r}, "a+") as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    f.seek(0)
    n = len(f.read()) + 1
    f.write("x")
if n >= 6:
    sys.stderr.write("sbatch: error: Batch job submission failed: Socket timed out\\n")
    sys.exit(1)
print(1000 + n)
"""


@pytest.fixture
def failing_sbatch(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sbatch = bin_dir / "sbatch"
    sbatch.write_text(SBATCH.format(python=sys.executable, counter=str(tmp_path / "n")))
    sbatch.chmod(0o755)
    (tmp_path / "job.yaml").write_text('name: t\ncommand: ["true"]\n')
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", PYTHONPATH=str(ROOT))
    return env


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
    assert ids == [str(1000 + n) for n in range(1, 6)]
    assert "Submitted 5 of 20 jobs" in r.stderr and "Socket timed out" in r.stderr


def test_partial_submission_in_json(failing_sbatch: dict[str, str], tmp_path: Path) -> None:
    r = _submit(failing_sbatch, tmp_path, "--json")
    assert r.returncode == 4, r.stderr
    out = json.loads(r.stdout)
    assert out["job_ids"] == ["1001", "1002", "1003", "1004", "1005"]
    assert out["requested"] == 20 and out["submitted"] == 5
    assert out["failed"] >= 1 and out["failed"] + out["not_attempted"] == 15
    assert "Socket timed out" in out["error"]
