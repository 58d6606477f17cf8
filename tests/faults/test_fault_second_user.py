"""A second user (user2) trying to reach user1's jobs, records, broker sockets and report.

Slurm already keeps user2 from cancelling user1's jobs; acbslurm must not open a way
around it: no GPU of user1's job through `acbslurm run`, no access to the broker in
user1's job, no way to plant a socket before it starts, no report rows.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from sandboxtest import IMAGE, REPO, acbslurm_run, submit, wait_job, wait_until

from acbslurm.config import load_settings
from acbslurm.hooks.orphans import forget_unswept, remember_unswept, unswept

pytestmark = pytest.mark.integration


def as_user(sb: Any, user: str, *argv: str, **env: str) -> Any:
    return sb.run_as(
        user, list(argv), extra_env={"PYTHONPATH": str(REPO), **env}, check=False, timeout=60
    )


def acbslurm_as(sb: Any, user: str, *args: str, **env: str) -> Any:
    return as_user(sb, user, sys.executable, "-m", "acbslurm", *args, **env)


def test_user2_cannot_cancel_or_borrow_user1s_job(idle: Any, scripts: Path) -> None:
    sb = idle
    job = submit(sb, scripts, "exec " + acbslurm_run(IMAGE, "sleep", "60"), "--gres=gpu:1")
    wait_job(sb, job, ("RUNNING",), 60)
    r = acbslurm_as(sb, "user2", "cancel", job)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "Access/permission denied" in r.stderr
    # Its GPUs through `acbslurm run`, claiming to be in that job: refused.
    r = acbslurm_as(sb, "user2", "run", IMAGE, "true", SLURM_JOB_ID=job)
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    assert f"job {job} belongs to user1, not to you" in r.stderr
    assert wait_job(sb, job, ("RUNNING",), 5)["JobState"] == "RUNNING"


def test_user2_cannot_reach_or_take_user1s_job_broker(idle: Any, scripts: Path) -> None:
    sb = idle
    base = load_settings(str(sb.layout.acbslurm_conf)).job_runtime_dir
    broker = f"{sys.executable} -m acbslurm broker serve --devices cpu:1"
    body = f"{broker} &\nsleep 60\n"
    job = submit(sb, scripts, body, "--gres=gpu:1")
    wait_job(sb, job, ("RUNNING",), 60)
    sock = Path(base) / job / "broker.sock"
    # Until it listens (the socket file appears before that): user1, in or out of the
    # job, reaches its broker.
    status = ("broker", "status", "--broker", f"unix:{sock}")
    wait_until("user1's broker status", lambda: acbslurm_as(sb, "user1", *status).returncode == 0)
    st = os.stat(sock.parent)
    assert (st.st_uid, oct(st.st_mode & 0o777)) == (sb.uid, "0o700")
    # user2 is told "permission denied".
    r = acbslurm_as(sb, "user2", "broker", "status", "--broker", f"unix:{sock}")
    assert r.returncode == 1 and "permission denied" in r.stderr, r.stderr
    assert "DEADLINE_EXCEEDED" not in r.stderr and "Traceback" not in r.stderr
    # user2 cannot prepare a socket for user1's next job either.
    nxt = str(int(job) + 1)
    r = as_user(sb, "user2", "mkdir", str(Path(base) / nxt))
    assert r.returncode != 0 and not (Path(base) / nxt).exists()


def test_user2_cannot_change_user1s_records(idle: Any, scripts: Path) -> None:
    """The record of user1's running job and user1's unswept/ list (written by the real
    code, under the worst umask slurmd could give it): user2 can neither change, replace
    nor remove them, nor plant a file beside them. (Records are 0644 by design: jobs
    and `acbslurm status` read them.)"""
    sb = idle
    records = sb.layout.records
    job = submit(sb, scripts, "echo started; sleep 60", "--gres=gpu:1")
    wait_job(sb, job, ("RUNNING",), 60)
    rec = records / f"{job}.json"
    # The script runs once the prolog is done: no hook of user1 runs from here on
    # (the prolog's sweep would take the job off the unswept list below).
    out = scripts / f"out-{job}.txt"
    wait_until("the job's script", lambda: out.exists() and "started" in out.read_text(), 60)
    assert rec.exists()
    old = os.umask(0)
    try:
        remember_unswept(str(records), sb.uid, job)
    finally:
        os.umask(old)
    unswept_file = records / "unswept" / str(sb.uid)
    try:
        for f in (rec, unswept_file):
            before = f.read_bytes()
            for argv in (
                ["sh", "-c", f"echo 1 >> {f}"],
                ["sh", "-c", f": > {f}"],
                ["rm", "-f", str(f)],
                ["mv", str(f), f"{f}.x"],
                ["ln", "-sf", "/dev/null", str(f)],
            ):
                r = as_user(sb, "user2", *argv)
                assert r.returncode != 0, (argv, r.stdout)
            assert f.read_bytes() == before and not f.is_symlink(), f
        for d in (records, unswept_file.parent):
            r = as_user(sb, "user2", "touch", str(d / "planted"))
            assert r.returncode != 0 and not (d / "planted").exists(), d
        assert unswept(str(records), sb.uid) == [job]
    finally:
        forget_unswept(str(records), sb.uid, [job])
    assert wait_job(sb, job, ("RUNNING",), 5)["JobState"] == "RUNNING"


def report_jobs(sb: Any, user: str) -> list[dict[str, Any]]:
    """user1's jobs of the last year, as ``user`` gets them through the report service
    (sacct's rights, PrivateData=jobs)."""
    r = acbslurm_as(sb, user, "report", "--json", "--user", "user1", "--start", "now-365d")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    return list(json.loads(r.stdout)["jobs"])


def test_user2_gets_no_report_rows_of_user1(idle: Any, scripts: Path) -> None:
    sb = idle
    job = submit(sb, scripts, "true", "--gres=gpu:1")
    wait_job(sb, job, ("COMPLETED",), 60)
    # The same query as user1 shows user1's rows, this job's among them, once slurmdbd
    # has stored it: the query has rows to hide.
    mine = wait_until(
        "user1's report to show its job",
        lambda: [j for j in report_jobs(sb, "user1") if str(j["job_id_raw"]) == job],
    )
    assert {j["user"] for j in mine} == {"user1"}
    assert report_jobs(sb, "user2") == []
