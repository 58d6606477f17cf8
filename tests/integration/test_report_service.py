"""`acbslurm report` run by the users themselves, through the report service.

The sandbox's slurmdbd keeps jobs private (PrivateData=jobs), the database option file
is root's alone, and the service answers every user with what sacct would show them.
Acceptance: user1 and user2 each see their own jobs only; naming another user or account
shows nothing more; a forged uid changes nothing; a coordinator sees the accounts they
coordinate, an operator everything; and each user's numbers equal sacct's for them.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sandboxtest import REPO

from acbslurm.sandbox import Sandbox

pytestmark = pytest.mark.integration


def report_as(sb: Sandbox, user: str, *args: str) -> Any:
    return sb.run_as(
        user,
        [sys.executable, "-m", "acbslurm", "report", "--json", *args],
        extra_env={"PYTHONPATH": str(REPO)},
        check=False,
        timeout=120,
    )


def rows(sb: Sandbox, user: str, *args: str) -> dict[int, dict[str, Any]]:
    r = report_as(sb, user, *args)
    assert r.returncode == 0, r.stderr
    return {j["job_id_raw"]: j for j in json.loads(r.stdout)["jobs"]}


def sbatch_as(sb: Sandbox, user: str, *args: str) -> int:
    out = sb.run_as(user, ["sbatch", "--parsable", "-o", "/dev/null", *args]).stdout
    return int(out.strip().split(";")[0])


def stored(sb: Sandbox, jobs: list[int], t0: int) -> bool:
    """Whether MariaDB itself has the jobs as ended: sacct asks slurmdbd, which may answer
    from rows it has not committed yet, so a report can still miss them then."""
    r = subprocess.run(
        [sys.executable, "-m", "acbslurm", "report", "--json", "--start", f"@{t0}"],
        env={**os.environ, **sb.env(), "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    states = {j["job_id_raw"]: j["state"] for j in json.loads(r.stdout)["jobs"]}
    return all(states.get(j) == "COMPLETED" for j in jobs)


@pytest.fixture(scope="module")
def two_users(sandbox: Sandbox) -> Iterator[dict[str, Any]]:
    sb = sandbox
    sb.wait_idle()
    t0 = int(time.time()) - 2
    jobs = {
        "user1": sbatch_as(sb, "user1", "--gres=gpu:1", "--wrap", "sleep 1"),
        "user2": sbatch_as(sb, "user2", "--gres=gpu:1", "--wrap", "sleep 1"),
    }
    deadline = time.monotonic() + 90
    while not stored(sb, list(jobs.values()), t0):
        assert time.monotonic() < deadline, "jobs not stored by slurmdbd"
        time.sleep(0.5)
    yield {"t0": t0, **jobs}


def test_each_user_sees_their_own_jobs_only(sandbox: Sandbox, two_users: dict[str, Any]) -> None:
    start = f"@{two_users['t0']}"
    for user, other in (("user1", "user2"), ("user2", "user1")):
        mine = rows(sandbox, user, "--start", start)
        assert two_users[user] in mine and two_users[other] not in mine, (user, mine)
        assert {j["user"] for j in mine.values()} == {user}
        # Naming the other user or their account shows nothing more.
        assert rows(sandbox, user, "--start", start, "--user", other) == {}
        assert rows(sandbox, user, "--start", start, "--account", other) == {}
        # The numbers are sacct's for that job.
        r = sandbox.run_slurm(
            ["sacct", "-X", "-n", "-P", "-j", str(two_users[user]), "-o", "ElapsedRaw"]
        )
        assert mine[two_users[user]]["gpu_seconds"] == int(r.stdout.split()[0])


def test_the_table_says_what_is_shown(sandbox: Sandbox, two_users: dict[str, Any]) -> None:
    r = sandbox.run_as(
        "user2",
        [sys.executable, "-m", "acbslurm", "report", "--start", f"@{two_users['t0']}"],
        extra_env={"PYTHONPATH": str(REPO)},
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert "# shown: the jobs of user2 (PrivateData=jobs)" in r.stdout


def _raw_request(sb: Sandbox, user: str, request: dict[str, Any]) -> str:
    """What the service answers ``request`` sent by ``user`` on its socket, as raw text."""
    code = (
        "import json, socket, sys; s = socket.socket(socket.AF_UNIX); "
        f"s.connect({str(sb.layout.run / 'report.sock')!r}); "
        f"s.sendall(json.dumps({request!r}).encode() + b'\\n'); "
        "sys.stdout.write(s.makefile('rb').read().decode())"
    )
    return str(sb.run_as(user, [sys.executable, "-c", code], timeout=60).stdout)


def test_a_forged_uid_or_database_changes_nothing(
    sandbox: Sandbox, two_users: dict[str, Any]
) -> None:
    options = {"start": f"@{two_users['t0']}", "fmt": "json"}
    answer = _raw_request(sandbox, "user2", {"options": options, "uid": 1001, "user": "user1"})
    assert f'"job_id_raw": {two_users["user2"]}' in answer
    assert f'"job_id_raw": {two_users["user1"]}' not in answer
    assert "the jobs of user2" in answer
    denied = _raw_request(sandbox, "user2", {"options": {**options, "db_config": "/tmp/mine.cnf"}})
    assert denied.startswith("X 1 ") and "forbidden option(s) db_config" in denied


def test_a_coordinator_and_an_operator_see_more(
    sandbox: Sandbox, two_users: dict[str, Any]
) -> None:
    sb, start = sandbox, f"@{two_users['t0']}"
    sb.run_slurm(["sacctmgr", "-i", "add", "coordinator", "account=user1", "names=user2"])
    try:
        seen = rows(sb, "user2", "--start", start)
        assert {two_users["user1"], two_users["user2"]} <= set(seen)
    finally:
        sb.run_slurm(["sacctmgr", "-i", "remove", "coordinator", "account=user1", "names=user2"])
    assert two_users["user1"] not in rows(sb, "user2", "--start", start)
    sb.run_slurm(["sacctmgr", "-i", "modify", "user", "user2", "set", "adminlevel=Operator"])
    try:
        assert two_users["user1"] in rows(sb, "user2", "--start", start)
    finally:
        sb.run_slurm(["sacctmgr", "-i", "modify", "user", "user2", "set", "adminlevel=None"])


def test_no_service_no_credentials_is_a_clear_error(sandbox: Sandbox) -> None:
    r = sandbox.run_as(
        "user1",
        [sys.executable, "-m", "acbslurm", "report"],
        extra_env={"PYTHONPATH": str(REPO), "ACBSLURM_REPORT_SOCKET": "/nonexistent/r.sock"},
        check=False,
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "is not readable by this user" in r.stderr


def test_the_service_socket_is_roots_and_every_user_reaches_it(sandbox: Sandbox) -> None:
    """What the service's rights rest on: the socket is root's, in a folder only root
    may write (nobody can put another socket there), open to every user (who asks is
    read from the connection, SO_PEERCRED), and user2 connects to it."""
    path = sandbox.layout.run / "report.sock"
    st = os.lstat(path)
    assert stat.S_ISSOCK(st.st_mode) and st.st_uid == 0, oct(st.st_mode)
    folder = os.stat(path.parent)
    assert folder.st_uid == 0 and not folder.st_mode & 0o022, oct(folder.st_mode)
    probe = f"import socket; s = socket.socket(socket.AF_UNIX); s.connect({str(path)!r})"
    res = sandbox.run_as("user2", [sys.executable, "-c", probe], check=False)
    assert res.returncode == 0, res.stderr


def test_which_gpu_a_job_used_stays_known_after_it_ended(sandbox: Sandbox) -> None:
    sb = sandbox
    sb.wait_idle()
    t0 = int(time.time()) - 2
    job = sbatch_as(sb, "user1", "--gres=gpu:2", "--wrap", "sleep 1")
    uuids = {g.uuid for g in sb.gpus}
    deadline = time.monotonic() + 90
    record = sb.layout.records / f"{job}.json"
    # Ended, and its record gone: only slurmdbd knows now. slurmdbd may store
    # COMPLETED before the epilog has run (the job is still COMPLETING), so the
    # record's removal is a state of its own to wait for.
    while True:
        got = rows(sb, "user1", "--start", f"@{t0}").get(job)
        done = got and got["state"] == "COMPLETED" and got["gpu_devices"]
        if done and not record.exists():
            break
        assert time.monotonic() < deadline, f"job {job}: {got}, record left: {record.exists()}"
        time.sleep(0.5)
    assert {d["uuid"] for d in got["gpu_devices"]} == uuids
    assert sorted(d["index"] for d in got["gpu_devices"]) == [0, 1]
    assert {d["node"] for d in got["gpu_devices"]} == {sb.params.node}
