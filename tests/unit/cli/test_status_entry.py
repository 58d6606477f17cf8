"""`acbslurm status` through the console entry: what it prints, its exit codes and its
one line of error, as a user runs it."""

from __future__ import annotations

import getpass
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fake_slurm import FakeSlurm

ROOT = Path(__file__).resolve().parents[3]
T0 = "2026-11-30T01:00:00"


def entry(fake: FakeSlurm, tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """``acbslurm ARGV`` through the console entry in a fresh interpreter."""
    (tmp_path / "none.yaml").write_text("{}\n")
    env = dict(
        os.environ,
        PATH=f"{fake.bin_dir}{os.pathsep}{os.environ['PATH']}",
        PYTHONPATH=str(ROOT),
        ACBSLURM_CONFIG=str(tmp_path / "none.yaml"),
        ACBSLURM_RECORD_DIR=str(tmp_path / "records"),
        ACBSLURM_SLURM_BACKEND="auto",
    )
    code = f"from acbslurm.cli.entry import main; main({list(argv)!r})"
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, cwd=ROOT
    )


@pytest.fixture
def jobs(fake_slurm: FakeSlurm, tmp_path: Path) -> FakeSlurm:
    me = getpass.getuser()
    fake_slurm.add_job("7", "RUNNING", user=me, node="vm", start=T0, gpus=[1], workdir="/nx")
    fake_slurm.add_job("8", "PENDING", user="user2", reason="Priority", name="a\x1b[31mred")
    fake_slurm.add_job("9", "FAILED", end=T0, exit_code="2:0", reason="NonZeroExitCode")
    return fake_slurm


@pytest.mark.parametrize("argv", [[], ["-l"], ["7", "9", "99999"], ["--user", "user2"]], ids=str)
def test_the_entry_prints_the_table_and_names_unknown_ids(
    jobs: FakeSlurm, tmp_path: Path, argv: list[str]
) -> None:
    r = entry(jobs, tmp_path, "status", *argv)
    assert r.stdout.startswith("JOBID  USER"), r.stdout + r.stderr
    # a name's terminal escapes are dropped off a terminal (click.echo)
    assert "\x1b" not in r.stdout and ("ared" in r.stdout or "--user" not in argv)
    if argv == ["7", "9", "99999"]:
        assert r.returncode == 1 and r.stderr == "Error: no such job: 99999\n"
        assert [line.split()[0] for line in r.stdout.splitlines()[1:]] == ["7", "9"]
    else:
        assert (r.returncode, r.stderr) == (0, "")


def test_the_entry_writes_json_as_json_dumps_indents_it(jobs: FakeSlurm, tmp_path: Path) -> None:
    r = entry(jobs, tmp_path, "status", "--json", "7", "99999")
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert r.stdout == json.dumps(doc, indent=2) + "\n"
    assert [j["job_id"] for j in doc["jobs"]] == ["7"] and doc["unknown"] == ["99999"]


def test_a_failure_is_one_error_line_and_its_exit_code(jobs: FakeSlurm, tmp_path: Path) -> None:
    jobs.respond("squeue", stderr="squeue: error: Invalid user: nobody9\n", rc=1)
    r = entry(jobs, tmp_path, "status", "-u", "nobody9")
    assert r.returncode == 1
    assert r.stderr.startswith("Error: ") and "Invalid user: nobody9" in r.stderr
    assert "Traceback" not in r.stderr
