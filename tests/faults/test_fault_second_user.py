"""A second user (user2) trying to reach user1's jobs, records, broker sockets and report.

Slurm already keeps user2 from cancelling user1's jobs; acbslurm must not open a way
around it: no GPU of user1's job through `acbslurm run`, no access to the broker in
user1's job, no way to plant a socket before it starts, no report rows.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from sandboxtest import IMAGE, REPO, acbslurm_run, submit, wait_job

from acbslurm.config import load_settings

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
    deadline = time.monotonic() + 30
    while not sock.exists():
        assert time.monotonic() < deadline, f"no broker socket at {sock}"
        time.sleep(0.2)
    st = os.stat(sock.parent)
    assert (st.st_uid, oct(st.st_mode & 0o777)) == (sb.uid, "0o700")
    # user1 (in or out of the job) reaches its broker; user2 is told "permission denied".
    assert acbslurm_as(sb, "user1", "broker", "status", "--broker", f"unix:{sock}").returncode == 0
    r = acbslurm_as(sb, "user2", "broker", "status", "--broker", f"unix:{sock}")
    assert r.returncode == 1 and "permission denied" in r.stderr, r.stderr
    assert "DEADLINE_EXCEEDED" not in r.stderr and "Traceback" not in r.stderr
    # user2 cannot prepare a socket for user1's next job either.
    nxt = str(int(job) + 1)
    r = as_user(sb, "user2", "mkdir", str(Path(base) / nxt))
    assert r.returncode != 0 and not (Path(base) / nxt).exists()


def test_user2_gets_no_report_rows_of_user1(idle: Any) -> None:
    # Through the report service, with sacct's rights (PrivateData=jobs): none of user1's.
    r = acbslurm_as(idle, "user2", "report", "--json", "--user", "user1", "--start", "now-365d")
    assert r.returncode == 0, r.stderr
    assert '"jobs": []' in r.stdout.replace("\n", "") or '"user": "user1"' not in r.stdout
    assert '"user": "user1"' not in r.stdout
