"""A user's own report and a failing job told clearly, on the real sandbox, driven as
user1 and user2 (not as root)."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sandboxtest import IMAGE, REPO, no_jobs
from sandboxtest import acbslurm_as as as_user


@pytest.fixture
def workdir(sb: Any) -> Iterator[Path]:
    """A folder user1 and user2 can write: jobs' outputs land here."""
    with tempfile.TemporaryDirectory(prefix="acbslurm-cli-") as d:
        os.chmod(d, 0o777)
        yield Path(d)


def spec(folder: Path, text: str) -> str:
    path = folder / f"job-{len(list(folder.iterdir()))}.yaml"
    path.write_text(text)
    path.chmod(0o644)
    return str(path)


BUSYBOX = f"""\
name: cli-test
partition: p1
gpus: 1
time: "2"
output: out-%j.txt
error: err-%j.txt
container:
  image: {IMAGE}
  pull: never
  command: [sh, -c, "echo to-stderr >&2; exit 3"]
"""


def test_wait_reports_the_exit_code_and_error_tail(sb: Any, idle: Any, workdir: Path) -> None:
    res = as_user(sb, "user1", "submit", spec(workdir, BUSYBOX), "--wait", cwd=str(workdir))
    assert res.returncode == 1, res.stderr
    assert "FAILED" in res.stderr and "exit code 3" in res.stderr
    assert "to-stderr" in res.stderr  # the last lines of the error file
    assert "Traceback" not in res.stderr


def test_pull_never_with_a_missing_image_fails_at_once_with_the_reason(
    sb: Any, idle: Any, workdir: Path
) -> None:
    text = BUSYBOX.replace(IMAGE, "acbslurm/not-there:1")
    res = as_user(sb, "user1", "submit", spec(workdir, text), "--wait", cwd=str(workdir))
    assert res.returncode == 1
    assert "Warning: image 'acbslurm/not-there:1' is not in your Docker daemon" in res.stderr
    assert "is not in your Docker daemon and the pull policy is never" in res.stderr


def test_submit_from_a_folder_user1_cannot_write_is_refused(sb: Any, idle: Any) -> None:
    res = as_user(sb, "user1", "submit", str(REPO / "conf/examples/sandbox-gpu.yaml"), cwd="/")
    assert res.returncode == 2
    assert "is not writable by user1" in res.stderr and "nothing was submitted" in res.stderr


def test_unknown_partition_and_foreign_account_are_refused(
    sb: Any, idle: Any, workdir: Path
) -> None:
    text = BUSYBOX.replace("partition: p1", "partition: nosuch") + "account: nosuchacct\n"
    res = as_user(sb, "user2", "submit", spec(workdir, text), cwd=str(workdir))
    assert res.returncode == 2
    assert "partition 'nosuch' does not exist" in res.stderr
    assert "account 'nosuchacct' does not exist or user2 may not charge it" in res.stderr


def test_a_hidden_partition_is_taken_as_sbatch_takes_it(sb: Any, idle: Any, workdir: Path) -> None:
    """The sandbox's `urgent` partition is Hidden=YES: `scontrol show partition` without
    -a says it is not found, sbatch takes it; so does submit, and `status` lists the
    job (squeue without -a would not)."""
    text = HOLD.replace("partition: p1", "partition: urgent").replace("gpus: 1\n", "")
    res = as_user(sb, "user1", "submit", "--json", spec(workdir, text), cwd=str(workdir))
    assert res.returncode == 0, res.stderr
    assert "does not exist" not in res.stderr and "Warning" not in res.stderr, res.stderr
    (job,) = json.loads(res.stdout)["job_ids"]
    shown = as_user(sb, "user1", "status", "--json", cwd=str(workdir))
    rows = {str(j["job_id"]): j for j in json.loads(shown.stdout)["jobs"]}
    assert rows[str(job)]["partition"] == "urgent", rows
    assert as_user(sb, "user1", "cancel", str(job)).returncode == 0


def test_what_the_node_would_refuse_is_refused_at_submit_with_its_line(
    sb: Any, idle: Any, workdir: Path
) -> None:
    """As user1: a mount source user1 cannot read (root's 0700 folder) and a 200 KB
    command (over Linux's 128 KiB for one argument) were refused only on the node after
    the job waited; now submit refuses them, exit 2, each with the spec's file:line,
    and nothing is queued."""
    secret = workdir / "root-only"
    secret.mkdir(mode=0o700)
    text = BUSYBOX.replace(
        "  pull: never\n", f"  pull: never\n  mounts:\n    - {secret}:/data:ro\n"
    )
    path = spec(workdir, text)
    res = as_user(sb, "user1", "submit", path, cwd=str(workdir))
    assert res.returncode == 2, res.stderr
    assert f"{path}:11: container.mounts.0: mount source '{secret}' is a folder user1 " in (
        res.stderr
    )
    assert "cannot read (mode 700, owner uid 0)" in res.stderr, res.stderr
    big = BUSYBOX.replace('"echo to-stderr >&2; exit 3"', '"echo ' + "x" * 200_000 + '"')
    path = spec(workdir, big)
    res = as_user(sb, "user1", "submit", path, cwd=str(workdir))
    assert res.returncode == 2, res.stderr
    assert f"{path}:10: container.command.2: is 200005 bytes, over Linux's 131071" in res.stderr
    assert "Traceback" not in res.stderr
    queued = sb.run_slurm(["squeue", "-a", "-h", "-u", "user1"]).stdout
    assert not queued.strip(), queued


def test_no_memlock_limit_runs_with_the_jobs_own(sb: Any, idle: Any, workdir: Path) -> None:
    """docs/multi-node.md's `memlock: -1` on the sandbox: the job runs; where its hard
    limit is finite (8 MiB here, as Debian's default), its container gets that limit
    and the job's output says so; where it is not, no limit and nothing said."""
    text = BUSYBOX.replace(
        "  pull: never\n", "  pull: never\n  ulimits:\n    memlock: -1\n"
    ).replace('"echo to-stderr >&2; exit 3"', '"echo locked=$(ulimit -l):$(ulimit -H -l)"')
    res = as_user(sb, "user1", "submit", "--wait", spec(workdir, text), cwd=str(workdir))
    assert res.returncode == 0, res.stderr
    (out,) = workdir.glob("out-*.txt")
    (err,) = workdir.glob("err-*.txt")
    soft, _, hard = out.read_text().strip().rpartition("locked=")[2].partition(":")
    assert soft == hard, out.read_text()
    notice = "--ulimit memlock=-1 asks for no memlock limit, but this job's hard limit"
    if hard == "unlimited":
        assert notice not in err.read_text()
    else:
        told = f"{notice} on this node is {int(hard) * 1024} (`ulimit -H`)"
        assert told in err.read_text(), err.read_text()


HOLD = """\
name: cli-hold
partition: p1
gpus: 1
time: "2"
output: out-%j.txt
command: [sleep, "60"]
"""


def test_status_and_gpu_view_as_two_users(sb: Any, idle: Any, workdir: Path) -> None:
    # Plain commands: user2 has no Docker daemon of its own in the sandbox.
    one = as_user(sb, "user1", "submit", spec(workdir, HOLD), cwd=str(workdir))
    two = as_user(sb, "user2", "submit", spec(workdir, HOLD), cwd=str(workdir))
    assert one.returncode == 0 and two.returncode == 0, (one.stderr, two.stderr)
    ids = [one.stdout.strip(), two.stdout.strip()]
    try:
        import time

        deadline = time.monotonic() + 60
        while True:
            res = as_user(sb, "user1", "status", "--json", *ids)
            jobs = json.loads(res.stdout)["jobs"]
            if all(j["state"] == "RUNNING" and j["gpu_indices"] for j in jobs):
                break
            assert time.monotonic() < deadline, f"not both running with GPUs: {jobs}"
            time.sleep(0.5)
        assert {j["user"] for j in jobs} == {"user1", "user2"}
        assert all(j["partition"] == "p1" and j["end"] is None for j in jobs)
        view = json.loads(as_user(sb, "user2", "status", "--gpus", "--json").stdout)["gpus"]
        held = {g["job_id"] for g in view if g["job_id"]}
        assert held == set(ids)
        table = as_user(sb, "user1", "status").stdout.splitlines()
        assert table[0].split()[:3] == ["JOBID", "USER", "PARTITION"]
        res = as_user(sb, "user1", "cancel", "--json", ids[0], "99999")
        assert res.returncode == 1 and json.loads(res.stdout)["unknown"] == ["99999"]
        assert "Error: no such job: 99999" in res.stderr
    finally:
        no_jobs(sb)


def test_report_into_head_is_no_traceback(sb: Any) -> None:
    res = sb.run_as(
        "user1",
        ["sh", "-c", f"{sys.executable} -m acbslurm report --by job | head -n 1"],
        check=False,
        extra_env={"PYTHONPATH": str(REPO)},
    )
    assert "Traceback" not in res.stderr and "Exception ignored" not in res.stderr
