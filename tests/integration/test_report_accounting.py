"""`acbslurm report` against the sandbox's real slurmdbd database and real jobs.

Acceptance: after completed, failed, cancelled (running and pending), running, 1- and
2-GPU, array and requeued jobs, the per-job GPU-seconds of ``report --format json`` equal
gres/gpu x ElapsedRaw of ``sacct -X -a -P`` for every job, and per-user sums match.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from acbslurm.sandbox import Sandbox

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def report(
    sb: Sandbox, *args: str, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **sb.env(), "PYTHONPATH": str(ROOT), **(extra_env or {})}
    return subprocess.run(
        [sys.executable, "-m", "acbslurm", "report", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def sbatch(sb: Sandbox, *args: str) -> str:
    out = sb.run_as_user(["sbatch", "--parsable", "-p", "p1", "-o", "/dev/null", *args]).stdout
    return out.strip().split(";")[0]


def squeue_state(sb: Sandbox, job: str) -> str:
    out = sb.run_slurm(["squeue", "-h", "-j", job, "-o", "%T"], check=False).stdout
    return out.strip().splitlines()[0] if out.strip() else "GONE"


def wait_for(pred: Any, timeout: float = 60, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def gpus_of(tres: str) -> int:
    m = re.search(r"gres/gpu=(\d+)", tres)
    return int(m.group(1)) if m else 0


def sacct_jobs(sb: Sandbox, start: int) -> dict[int, dict[str, Any]]:
    out = sb.run_slurm(
        [
            "sacct",
            "-X",
            "-a",
            "-P",
            "-n",
            "--noconvert",
            "-o",
            "JobIDRaw,JobID,UID,State,AllocTRES,ElapsedRaw",
            "-S",
            time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(start)),
            "-E",
            "now",
        ]
    ).stdout
    jobs: dict[int, dict[str, Any]] = {}
    for line in out.splitlines():
        raw, jid, uid, state, tres, elapsed = line.split("|")
        jobs[int(raw)] = {
            "job_id": jid,
            "uid": uid,
            "state": state,
            "gpu_seconds": gpus_of(tres) * int(elapsed),
            "gpus": gpus_of(tres),
        }
    return jobs


def ran_a_second(sb: Sandbox, job: str) -> bool:
    """slurmdbd has the job's start, and the clock is past its second: ended now, its
    ElapsedRaw is at least 1."""
    out = sb.run_slurm(
        ["env", "SLURM_TIME_FORMAT=%s", "sacct", "-X", "-n", "-P", "-j", job, "-o", "Start"],
        check=False,
    ).stdout.split()
    return bool(out) and out[-1].isdigit() and int(time.time()) > int(out[-1])


@pytest.fixture(scope="module")
def history(sandbox: Sandbox) -> dict[str, Any]:
    """Real jobs of every kind the acceptance names; returns their ids and the start."""
    sb = sandbox
    sb.wait_idle()
    # The window opens at the next whole second: every earlier test's job (one of
    # test_publish_sandbox failed a second before `one` was submitted) ended before it.
    t0 = int(time.time()) + 1
    wait_for(lambda: time.time() >= t0, timeout=5, what="the window's first second")
    ids: dict[str, Any] = {}
    ids["one"] = sbatch(sb, "--gres=gpu:1", "--wrap", "sleep 2")
    ids["two"] = sbatch(sb, "--gres=gpu:2", "--wrap", "sleep 3")
    ids["failed"] = sbatch(sb, "--gres=gpu:1", "--wrap", "sleep 1; exit 3")
    # Never eligible inside the window: sacct (and so the report) leaves it out.
    ids["not_eligible"] = sbatch(sb, "--gres=gpu:1", "--begin=now+3600", "--wrap", "true")
    sb.run_slurm(["scancel", ids["not_eligible"]])
    wait_for(
        lambda: all(squeue_state(sb, ids[k]) == "GONE" for k in ("one", "two", "failed")),
        what="short jobs to finish",
    )
    ids["array"] = sbatch(sb, "--gres=gpu:1", "--array=0-2", "--wrap", "sleep 2")
    wait_for(lambda: squeue_state(sb, ids["array"]) == "GONE", what="array to finish")
    ids["cancelled"] = sbatch(sb, "--gres=gpu:1", "--wrap", "sleep 300")
    ids["requeued"] = sbatch(sb, "--gres=gpu:1", "--requeue", "--wrap", "sleep 300")
    for k in ("cancelled", "requeued"):
        wait_for(lambda k=k: squeue_state(sb, ids[k]) == "RUNNING", what=f"{k} to run")
    # Both GPUs of the sandbox are taken: this one pends (Resources) and is cancelled,
    # never started.
    ids["pending_cancelled"] = sbatch(sb, "--gres=gpu:1", "--wrap", "true")
    wait_for(lambda: squeue_state(sb, ids["pending_cancelled"]) == "PENDING", what="pending")
    # The cancelled and the requeued run must count GPU-seconds: their start is in
    # slurmdbd and a whole second has passed since (ElapsedRaw = end - start, seconds).
    wait_for(
        lambda: all(ran_a_second(sb, ids[k]) for k in ("cancelled", "requeued")),
        what="cancelled and requeued to have run a second",
    )
    sb.run_slurm(["scancel", ids["cancelled"], ids["pending_cancelled"]])
    sb.run_slurm(["scontrol", "requeue", ids["requeued"]])
    wait_for(
        lambda: all(squeue_state(sb, ids[k]) == "GONE" for k in ("cancelled", "pending_cancelled")),
        what="cancel",
    )
    # The requeued job waits before it is eligible again, so both GPUs are free for a
    # 2-GPU job that is still running when the report is made.
    ids["running"] = sbatch(sb, "--gres=gpu:2", "--wrap", "sleep 600")
    wait_for(lambda: squeue_state(sb, ids["running"]) == "RUNNING", what="running to run")
    # Its devices reach its AdminComment when the prolog on its node has run, which may
    # be after slurmctld shows it RUNNING (a CI run read the report in that gap).
    wait_for(
        lambda: (
            "acbslurm:gpus="
            in sb.run_slurm(["scontrol", "show", "job", "-o", ids["running"]]).stdout
        ),
        what="the running job's prolog to record its GPUs",
    )

    # slurmctld hands records to slurmdbd asynchronously: wait until they are stored.
    def stored() -> bool:
        pc = sb.run_slurm(
            ["sacct", "-X", "-n", "-P", "-j", ids["pending_cancelled"], "-o", "State"]
        )
        rq = sb.run_slurm(["sacct", "-D", "-X", "-n", "-P", "-j", ids["requeued"], "-o", "State"])
        # The running job's start reaches slurmdbd after squeue shows it RUNNING: a
        # report read before that saw it pending (a fresh-clone run failed on this).
        run = sb.run_slurm(["sacct", "-X", "-n", "-P", "-j", ids["running"], "-o", "State"])
        return (
            "CANCELLED" in pc.stdout
            and len(rq.stdout.split()) >= 2
            and run.stdout.split() == ["RUNNING"]
        )

    wait_for(stored, timeout=60, what="slurmdbd to store the records")

    # sacct asks slurmdbd, which may answer from rows not yet committed to MariaDB; the
    # report reads MariaDB. Wait until both see the same jobs in the same states.
    def committed() -> bool:
        doc = json.loads(report(sb, "--format", "json", "--start", f"@{t0}").stdout)
        mine = {j["job_id_raw"]: j["state"] for j in doc["jobs"]}
        theirs = {raw: a["state"].split()[0] for raw, a in sacct_jobs(sb, t0).items()}
        return mine == theirs

    wait_for(committed, timeout=60, what="MariaDB to hold what slurmdbd says")
    ids["t0"] = t0
    yield ids
    sb.wait_idle()


def live_util_tres(sb: Sandbox) -> tuple[int, bool]:
    """slurmdbd's schema version and whether its tres_table has gres/gpuutil."""
    from acbslurm.sandbox import mariadb

    out = mariadb.sql(
        sb.layout,
        "SELECT MAX(version) FROM slurm_acct_db.convert_version_table;\n"
        "SELECT COUNT(*) FROM slurm_acct_db.tres_table "
        "WHERE type = 'gres' AND name = 'gpuutil' AND deleted = 0;",
    ).split()
    return int(out[0]), int(out[1]) > 0


def test_per_job_gpu_seconds_equal_sacct(sandbox: Sandbox, history: dict[str, Any]) -> None:
    before = time.time()
    res = report(sandbox, "--format", "json", "--start", f"@{history['t0']}")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    acct = sacct_jobs(sandbox, history["t0"])
    slack = time.time() - before + 2  # running jobs grow between the two reads
    assert doc["report"]["definition"] == "sacct"
    # gres/gpuutil exists from Slurm 23.02 (schema 13) when gres/gpu is accounted; 22.05
    # never records it.
    version, has_util = live_util_tres(sandbox)
    assert doc["report"]["gpu_utilization"]["recorded"] is (version >= 13 and has_util)
    assert has_util is (sandbox.params.slurm_release >= "23.02")
    mine = {j["job_id_raw"]: j for j in doc["jobs"]}
    assert set(mine) == set(acct), (sorted(mine), sorted(acct))
    for raw, a in acct.items():
        j = mine[raw]
        assert j["gpus"] == a["gpus"], (raw, j, a)
        tol = a["gpus"] * slack if j["running"] else 0
        assert abs(j["gpu_seconds"] - a["gpu_seconds"]) <= tol, (raw, j, a)
        assert j["job_id"] == a["job_id"].replace("+0", "")
    # What the history must contain, seen through the report.
    by_state = {j["state"] for j in doc["jobs"]}
    assert {"COMPLETED", "FAILED", "CANCELLED", "RUNNING"} <= by_state
    assert mine[int(history["two"])]["gpus"] == 2
    assert mine[int(history["two"])]["gpu_seconds"] >= 2 * 3
    assert mine[int(history["pending_cancelled"])]["gpu_seconds"] == 0
    assert mine[int(history["pending_cancelled"])]["gpus"] == 0
    assert mine[int(history["pending_cancelled"])]["state"] == "CANCELLED"
    assert int(history["not_eligible"]) not in mine
    assert mine[int(history["running"])]["running"] is True
    # its devices, not in slurmdbd until it ends, come from slurmctld
    assert len(mine[int(history["running"])]["gpu_devices"]) == 2, mine[int(history["running"])]
    arrays = [j for j in doc["jobs"] if j["job_id"].startswith(f"{history['array']}_")]
    assert sorted(j["job_id"] for j in arrays) == [f"{history['array']}_{i}" for i in range(3)]
    # Per-user sums.
    sums: dict[str, int] = {}
    for a in acct.values():
        sums[a["uid"]] = sums.get(a["uid"], 0) + a["gpu_seconds"]
    res = report(sandbox, "--format", "json", "--by", "user", "--start", f"@{history['t0']}")
    # Keys are user names (uids where passwd has none): compare by uid.
    groups = {
        g["key"] if g["key"].isdigit() else str(pwd.getpwnam(g["key"]).pw_uid): g
        for g in json.loads(res.stdout)["groups"]
    }
    assert set(groups) == set(sums)
    n_running_gpus = sum(a["gpus"] for a in acct.values() if a["state"] == "RUNNING")
    for user, total in sums.items():
        assert abs(groups[user]["gpu_seconds"] - total) <= n_running_gpus * (slack + 5)


def test_requeued_job_has_two_rows_sreport_counts_both(
    sandbox: Sandbox, history: dict[str, Any]
) -> None:
    rq = int(history["requeued"])
    dup = sandbox.run_slurm(
        ["sacct", "-D", "-X", "-P", "-n", "-j", str(rq), "-o", "State,ElapsedRaw,AllocTRES"]
    ).stdout.splitlines()
    assert len(dup) >= 2 and dup[0].split("|")[0] == "REQUEUED", dup
    first_run = int(dup[0].split("|")[1]) * gpus_of(dup[0].split("|")[2])
    assert first_run > 0
    start = f"@{history['t0']}"
    sacct_doc = json.loads(report(sandbox, "--format", "json", "--start", start).stdout)
    srep_doc = json.loads(
        report(sandbox, "--format", "json", "--definition", "sreport", "--start", start).stdout
    )
    assert [j["job_id_raw"] for j in sacct_doc["jobs"]].count(rq) == 1
    # ... and says what it left out: the earlier run, with its GPU-seconds
    # (the new row, not eligible yet, is outside the window: the earlier run is then
    # the job's row, and nothing is left out)
    left = sacct_doc["totals"]
    (row,) = [j for j in sacct_doc["jobs"] if j["job_id_raw"] == rq]
    if row["state"] == "REQUEUED":
        assert row["gpu_seconds"] == first_run and left["left_out_runs"] == 0, (row, left)
    else:
        assert left["left_out_runs"] >= 1, (row, left)
        assert left["left_out_gpu_seconds"] >= first_run, (row, left)
        table = report(sandbox, "--start", start).stdout
        assert "# left out: " in table and "earlier run(s) of requeued" in table, table
    rows = [j for j in srep_doc["jobs"] if j["job_id_raw"] == rq]
    # The requeued run is its own row, counted whole (it lies inside the window); the
    # new row may still wait for its begin time, i.e. not be eligible in the window yet.
    started = [d for d in dup if int(d.split("|")[1]) > 0]
    assert len(rows) >= len(started)
    requeued = [j for j in rows if j["state"] == "REQUEUED"]
    assert len(requeued) == 1 and requeued[0]["gpu_seconds"] == first_run
    assert srep_doc["report"]["definition"] == "sreport"


def test_filters_user_state_and_window(sandbox: Sandbox, history: dict[str, Any]) -> None:
    start = f"@{history['t0']}"
    res = report(
        sandbox, "--format", "json", "--user", sandbox.user, "--state", "F", "--start", start
    )
    doc = json.loads(res.stdout)
    assert [j["job_id_raw"] for j in doc["jobs"]] == [int(history["failed"])]
    res = report(sandbox, "--format", "json", "--user", "65530", "--start", start)
    assert json.loads(res.stdout)["jobs"] == []
    # A window that ended before the history began selects nothing.
    res = report(sandbox, "--format", "json", "--start", "@1000", "--end", "@2000")
    assert json.loads(res.stdout)["totals"]["jobs"] == 0
    res = report(sandbox, "--by", "day", "--format", "csv", "--start", start)
    assert res.stdout.splitlines()[0] == "key,jobs,running,gpu_seconds,gpu_hours,mean_wait_s,share"


def test_errors_are_clear_and_hide_the_password(sandbox: Sandbox) -> None:
    secret = "not-the-Password-42"
    res = report(sandbox, "--db-user", "acbslurm_ro", extra_env={"ACBSLURM_DB_PASSWORD": secret})
    assert res.returncode != 0
    assert "refused the login" in res.stderr
    assert secret not in res.stderr + res.stdout
    assert "Traceback" not in res.stderr
    res = report(sandbox, "--cluster", "nosuchcluster")
    assert (
        res.returncode != 0 and "'nosuchcluster' is not in this accounting database" in res.stderr
    )
    res = report(sandbox, "--db-host", "127.0.0.1", "--db-port", "1")
    assert res.returncode != 0 and "cannot reach the accounting database" in res.stderr
    assert "Traceback" not in res.stderr


def test_slices_correct_a_requeued_job_in_two_of_them(
    sandbox: Sandbox, history: dict[str, Any]
) -> None:
    """Split the selection right after the requeued run ended: its old row falls in the
    first slice, its new one in the second; the summed slices must equal one query."""
    from acbslurm.accounting.connection import connect
    from acbslurm.accounting.dbconfig import resolve_db_config
    from acbslurm.accounting.queries import Filters
    from acbslurm.accounting.report import ReportRequest, server_sums
    from acbslurm.accounting.schema import detect

    env = sandbox.env()
    cfg = resolve_db_config(environ=env)
    conn = connect(cfg)
    try:
        schema = detect(conn, env["ACBSLURM_CLUSTER"])
        cur = conn.cursor()
        cur.execute(
            f"SELECT time_eligible, time_end FROM {schema.table('job_table')}"
            " WHERE id_job = %s AND deleted = 0 ORDER BY time_submit",
            (int(history["requeued"]),),
        )
        rows = cur.fetchall()
        cur.close()
        assert len(rows) >= 2, rows
        first_end = int(rows[0][1])
        later = [(int(e), int(t)) for e, t in rows[1:]]
        assert first_end >= history["t0"] and all(t == 0 or t > first_end for _, t in later)
        now = int(time.time())
        # The window reaches a day ahead so that the new row (eligible after requeue's
        # delay) is selected too.
        f = Filters(start=history["t0"], end=now + 86400)
        assert any(e != 0 and e < f.end for e, _ in later), rows
        for by in ("user", "account", "partition"):
            req = ReportRequest(filters=f, now=now, definition="sacct", by=by)
            whole, one = server_sums(conn, schema, req)
            assert one.slices == 1
            split, run = server_sums(conn, schema, req, lambda: connect(cfg), [first_end + 1])
            assert (run.slices, run.fallback) == (2, False)
            assert run.straddling >= 1
            assert split == whole
            # The plain split (middle of the window) agrees too.
            mid, _ = server_sums(conn, schema, req, lambda: connect(cfg))
            assert mid == whole
    finally:
        conn.close()


def test_gpu_utilization_as_this_release_records_it(
    sandbox: Sandbox, history: dict[str, Any]
) -> None:
    """From 23.02, steps carry gres/gpuutil and gres/gpumem in tres_usage_in_ave/max.
    Emulated GPUs give no NVML samples, so the values are written into the job's step
    rows the way slurmdbd writes them ("id=value" items in id order), and the report
    must read them back; on 22.05 it must say that nothing is recorded."""
    from acbslurm.sandbox import mariadb

    version, has_util = live_util_tres(sandbox)
    job = int(history["two"])

    def job_util() -> tuple[dict[str, Any], Any]:
        res = report(sandbox, "--format", "json", "--start", f"@{history['t0']}")
        assert res.returncode == 0, res.stderr
        doc = json.loads(res.stdout)
        return doc["report"], next(j for j in doc["jobs"] if j["job_id_raw"] == job)["gpu_util"]

    if not has_util:
        meta, util = job_util()
        assert meta["gpu_utilization"]["recorded"] is False
        assert util is None
        return
    db = "slurm_acct_db"
    rows = mariadb.sql(
        sandbox.layout,
        f"SELECT id, name FROM {db}.tres_table WHERE type = 'gres' AND deleted = 0 "
        "AND name IN ('gpuutil', 'gpumem');",
    ).split()
    ids = dict(zip(rows[1::2], map(int, rows[0::2]), strict=True))
    cluster = sandbox.params.cluster

    def items(util: int, mem: int) -> str:
        pairs = sorted([(ids["gpuutil"], util), (ids["gpumem"], mem)])
        return ",".join(f"{i}={v}" for i, v in pairs)

    step = f"{db}.`{cluster}_step_table`"
    mariadb.sql(
        sandbox.layout,
        f"UPDATE {step} s JOIN {db}.`{cluster}_job_table` j ON s.job_db_inx = j.job_db_inx "
        f"SET s.tres_usage_in_ave = CONCAT_WS(',', NULLIF(s.tres_usage_in_ave, ''), "
        f"'{items(150, 1048576)}'), "
        f"s.tres_usage_in_max = CONCAT_WS(',', NULLIF(s.tres_usage_in_max, ''), "
        f"'{items(190, 2097152)}') WHERE j.id_job = {job} AND j.deleted = 0;",
    )
    meta, util = job_util()
    assert meta["schema_version"] == version
    assert meta["gpu_utilization"]["recorded"] is True
    assert (util["ave"], util["max"], util["mem_max"]) == (150, 190, 2097152), util
