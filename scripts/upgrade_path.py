"""The 22.05 -> 23.11 -> 25.11 upgrade path on one sandbox (run by `make matrix`).

Jobs are recorded on Debian's 22.05; the sandbox is then stopped and started on 23.11
(its slurmdbd converts schema 12 to 15) and on 25.11 (15 to 16). At every step the
report must give the same GPU numbers for those jobs, and they must equal sacct's.
Prints one JSON line per step; exit 0 when every step agrees.

    sudo .venv/bin/python scripts/upgrade_path.py [--dir DIR] [--port-base N]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from acbslurm.sandbox import Sandbox, mariadb  # noqa: E402
from acbslurm.sandbox.slurmbuild import choose_install  # noqa: E402

STEPS = ("debian", "23.11.11", "25.11.7")


def log(msg: str) -> None:
    print(f"upgrade-path: {msg}", file=sys.stderr, flush=True)


def schema_version(sb: Sandbox) -> int:
    out = mariadb.sql(sb.layout, "SELECT MAX(version) FROM slurm_acct_db.convert_version_table;")
    return int(out.split()[0])


def columns(sb: Sandbox) -> dict[str, list[str]]:
    """The job and step tables' columns as this release's slurmdbd left them."""
    cluster = sb.params.cluster
    out = mariadb.sql(
        sb.layout,
        "SELECT table_name, column_name FROM information_schema.columns "
        "WHERE table_schema = 'slurm_acct_db' ORDER BY table_name, ordinal_position;",
    )
    cols: dict[str, list[str]] = {"job": [], "step": []}
    for line in out.splitlines():
        table, column = line.split("\t")
        for kind in cols:
            if table == f"{cluster}_{kind}_table":
                cols[kind].append(column)
    return cols


def report(sb: Sandbox, start: int) -> dict[int, dict[str, Any]]:
    env = {**os.environ, **sb.env(), "PYTHONPATH": str(ROOT)}
    res = subprocess.run(
        [sys.executable, "-m", "acbslurm", "report", "--format", "json", "--start", f"@{start}"],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    if res.returncode != 0:
        raise SystemExit(f"report failed: {res.stderr}")
    doc = json.loads(res.stdout)
    return {
        int(j["job_id_raw"]): {
            "gpus": j["gpus"],
            "gpu_seconds": j["gpu_seconds"],
            "state": j["state"],
        }
        for j in doc["jobs"]
    }


def sacct(sb: Sandbox, start: int) -> dict[int, dict[str, Any]]:
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(start))
    out = sb.run_slurm(
        ["sacct", "-X", "-a", "-P", "-n", "--noconvert", "-o",
         "JobIDRaw,State,AllocTRES,ElapsedRaw", "-S", since, "-E", "now"]
    ).stdout  # fmt: skip
    jobs = {}
    for line in out.splitlines():
        raw, state, tres, elapsed = line.split("|")
        m = re.search(r"gres/gpu=(\d+)", tres)
        gpus = int(m.group(1)) if m else 0
        jobs[int(raw)] = {
            "gpus": gpus,
            "gpu_seconds": gpus * int(elapsed),
            "state": state.split()[0],
        }
    return jobs


def record_jobs(sb: Sandbox) -> tuple[int, list[int]]:
    start = int(time.time()) - 1
    ids = []
    for args in (["--gres=gpu:1", "--wrap", "sleep 2"], ["--gres=gpu:2", "--wrap", "sleep 3"],
                 ["--gres=gpu:1", "--wrap", "sleep 1; exit 3"]):  # fmt: skip
        out = sb.run_as_user(["sbatch", "--parsable", "-p", "p1", "-o", "/dev/null", *args])
        ids.append(int(out.stdout.strip().split(";")[0]))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        got = sacct(sb, start)
        if all(i in got and got[i]["state"] in ("COMPLETED", "FAILED") for i in ids):
            return start, ids
        time.sleep(1)
    raise SystemExit(f"jobs {ids} not recorded in time: {sacct(sb, start)}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/var/lib/acbslurm/upgrade-path")
    ap.add_argument("--port-base", type=int, default=16937)
    args = ap.parse_args()
    sb = Sandbox(args.dir)
    sb.down()
    shutil.rmtree(args.dir, ignore_errors=True)  # a fresh 22.05 database
    first: dict[int, dict[str, Any]] | None = None
    before: dict[str, list[str]] = {"job": [], "step": []}
    start, ids, ok = 0, [], True
    try:
        for step in STEPS:
            t = time.monotonic()
            install = choose_install(step, None, None, log)
            sb.down()
            log(sb.up(2, args.port_base, progress=log, install=install))
            if first is None:
                start, ids = record_jobs(sb)
            rep = {i: v for i, v in report(sb, start).items() if i in ids}
            acct = {i: v for i, v in sacct(sb, start).items() if i in ids}
            first = first or rep
            cols = columns(sb)
            changed: dict[str, Any] = {
                t: {
                    "added": [c for c in cols[t] if c not in before[t]],
                    "dropped": [c for c in before[t] if c not in cols[t]],
                }
                for t in cols
            }
            if not before["job"]:
                changed = {t: {"columns": len(cols[t])} for t in cols}
            before = cols
            same = rep == first and {i: v["gpu_seconds"] for i, v in rep.items()} == {
                i: v["gpu_seconds"] for i, v in acct.items()
            }
            ok = ok and same and set(rep) == set(ids)
            print(json.dumps({
                "slurm": sb.params.slurm_release, "schema": schema_version(sb),
                "jobs": {str(i): rep.get(i) for i in ids}, "equal_to_first_and_sacct": same,
                "columns": changed,
                "seconds": round(time.monotonic() - t, 1),
            }), flush=True)  # fmt: skip
    finally:
        sb.down()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
