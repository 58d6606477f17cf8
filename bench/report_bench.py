"""Time `acbslurm report` against sacct on the sandbox filled by report_fill.py.

Runs, in one go: (1) ``report --user X`` for a year, (2) an all-users ``--by user``
report for a month, (3) the equivalent ``sacct -X -a -P`` plus summing gres/gpu x
ElapsedRaw in Python, for both. Prints wall times, the speed-up, the peak RSS of each
report process, and whether the numbers agree (running jobs may grow by the seconds
between the two reads; that slack is printed). Each case runs once untimed (warm-up),
then ``--repeat`` times, the report and sacct alternating, and the medians are printed
(the machine is shared; one run alone says little); every pair must agree. The report
runs from cached bytecode, as an installed package does.

    python bench/report_bench.py [--dir SANDBOX] [--user UID] [--repeat N] [--service-only]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from acbslurm.sandbox import Sandbox

ROOT = Path(__file__).resolve().parents[1]
GOALS = {
    "user_year_s": 2.0,
    "all_month_s": 10.0,
    "speedup": 5.0,
    "rss_mb": 300.0,
    # the same report asked by the user through `acbslurm report serve` / direct as root
    "service_ratio": 1.10,
}


def timed_rss(argv: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(wall seconds, peak RSS MB of the report process itself, stdout).

    /usr/bin/time measures the exec'd process alone (wait4 on a fork of this big
    process would report the parent's pages too).
    """
    t0 = time.perf_counter()
    p = subprocess.run(
        ["/usr/bin/time", "-f", "maxrss_kb=%M", *argv], capture_output=True, text=True, env=env
    )
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"{argv[:6]} failed ({p.returncode}): {p.stderr.strip()[-2000:]}")
    kb = int(p.stderr.strip().splitlines()[-1].split("=", 1)[1])
    return wall, kb / 1024, p.stdout


def gpus_of(tres: str) -> int:
    for item in tres.split(","):
        if item.startswith("gres/gpu="):
            return int(item.split("=", 1)[1])
    return 0


def sacct_sum(
    sb: Sandbox, start: int, end: int, uid: int | None
) -> tuple[float, dict[str, int], int]:
    """(wall seconds incl. summing, GPU-seconds per uid, jobs) from sacct -X -a -P."""
    fmt = "%Y-%m-%dT%H:%M:%S"
    argv = [
        "sacct",
        "-X",
        "-a",
        "-P",
        "-n",
        "--noconvert",
        "-o",
        "JobIDRaw,UID,AllocTRES,ElapsedRaw",
        "-S",
        time.strftime(fmt, time.localtime(start)),
        "-E",
        time.strftime(fmt, time.localtime(end)),
    ]
    if uid is not None:
        argv += ["-u", str(uid)]
    env = {**os.environ, **sb.env()}
    t0 = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True, env=env, check=True).stdout
    per: dict[str, int] = {}
    jobs = 0
    for line in out.splitlines():
        _, u, tres, el = line.split("|")
        per[u] = per.get(u, 0) + gpus_of(tres) * int(el or 0)
        jobs += 1
    return time.perf_counter() - t0, per, jobs


def ensure_login(uid: int) -> str | None:
    """sacct -u only takes uids that passwd knows: add a no-login user for the run.

    Returns the name it created (to delete afterwards), or None if the uid existed.
    """
    import pwd

    try:
        pwd.getpwuid(uid)
        return None
    except KeyError:
        name = f"acbbench{uid}"
        subprocess.run(
            ["useradd", "-M", "-N", "-u", str(uid), "-s", "/usr/sbin/nologin", name], check=True
        )
        return name


def uid_key(key: str) -> str:
    if key.isdigit():
        return key
    import pwd

    try:
        return str(pwd.getpwnam(key).pw_uid)
    except KeyError:
        return key


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=None, help="sandbox directory")
    ap.add_argument("--user", type=int, default=None, help="uid for the one-user report")
    ap.add_argument("--repeat", type=int, default=5, help="runs per case (medians printed)")
    ap.add_argument(
        "--service-only", action="store_true", help="only the report service vs direct cases"
    )
    a = ap.parse_args()
    sb = Sandbox.load(a.dir)
    meta = json.loads((sb.layout.state / "bench-fill.json").read_text())
    uid = a.user if a.user is not None else int(meta["top_users"][0][0])
    env = {**os.environ, **sb.env(), "PYTHONPATH": str(ROOT)}
    # The report runs from bytecode, as an installed package does (pip compiles it at
    # install): a PYTHONDONTWRITEBYTECODE in the caller's environment would make every
    # run compile the checkout's modules again. The cache goes to a temporary folder.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    created = ensure_login(uid)
    try:
        with tempfile.TemporaryDirectory(prefix="acbslurm-bench-pyc-") as pyc:
            # Readable by the user the service case runs as: TemporaryDirectory is 0700,
            # and a user who cannot read the cache compiles every module on every run
            # (0.3 s here), which is the bench's cost, not the service's.
            os.chmod(pyc, 0o755)
            env["PYTHONPYCACHEPREFIX"] = pyc
            if a.service_only:
                return report_service_only(uid, env, max(1, a.repeat))
            return run(sb, uid, env, meta, max(1, a.repeat))
    finally:
        if created:
            subprocess.run(["userdel", created], check=False)


def run(sb: Sandbox, uid: int, env: dict[str, str], meta: dict[str, Any], repeat: int) -> int:
    now = int(time.time())
    year, month = now - 365 * 86400, now - 30 * 86400
    results: list[dict[str, Any]] = []
    for name, extra, start, who in (
        ("user_year", ["--user", str(uid), "--by", "user"], year, uid),
        ("user_year_per_job", ["--user", str(uid)], year, uid),
        ("all_month", ["--by", "user"], month, None),
    ):
        walls: list[float] = []
        s_walls: list[float] = []
        rss_max = 0.0
        same = True
        worst = 0
        slack = 0.0
        base = [sys.executable, "-m", "acbslurm", "report", "--format", "json"]
        # One untimed run each first: bytecode cached, both caches of the database warm.
        timed_rss([*base, "--start", f"@{start}", *extra], env)
        sacct_sum(sb, start, int(time.time()), who)
        for _ in range(repeat):
            t_end = int(time.time())
            argv = [*base, "--end", f"@{t_end}", "--start", f"@{start}", *extra]
            wall, rss, out = timed_rss(argv, env)
            doc = json.loads(out)
            s_wall, s_per, s_jobs = sacct_sum(sb, start, t_end, who)
            walls.append(wall)
            s_walls.append(s_wall)
            rss_max = max(rss_max, rss)
            gap = time.time() - t_end
            running_gpus_s = 8 * doc["totals"]["running"] * (gap + 2)
            if doc["groups"] is None:
                mine = {str(uid): doc["totals"]["gpu_seconds"]}
            else:
                mine = {uid_key(g["key"]): g["gpu_seconds"] for g in doc["groups"]}
            diffs = {k: mine.get(k, 0) - s_per.get(k, 0) for k in set(mine) | set(s_per)}
            pair_worst = max((abs(d) for d in diffs.values()), default=0)
            worst = max(worst, pair_worst)
            slack = max(slack, running_gpus_s)
            same = same and doc["totals"]["jobs"] == s_jobs and pair_worst <= running_gpus_s
        med, s_med = statistics.median(walls), statistics.median(s_walls)
        results.append(
            {
                "case": name,
                "runs": repeat,
                "jobs": doc["totals"]["jobs"],
                "sacct_jobs": s_jobs,
                "report_s": round(med, 3),
                "sacct_s": round(s_med, 3),
                "speedup": round(s_med / med, 1),
                "report_s_all": [round(w, 2) for w in walls],
                "sacct_s_all": [round(w, 2) for w in s_walls],
                "report_rss_mb": round(rss_max, 1),
                "gpu_hours": doc["totals"]["gpu_hours"],
                "sacct_gpu_hours": round(sum(s_per.values()) / 3600, 4),
                "max_abs_diff_gpu_s": worst,
                "allowed_running_slack_gpu_s": round(slack),
                "same_numbers": same,
            }
        )
    print(f"rows in job table (synthetic): {meta['rows']:,}; one-user uid {uid}")
    for r in results:
        print(json.dumps(r))
    ok = (
        results[0]["report_s"] <= GOALS["user_year_s"]
        and results[2]["report_s"] <= GOALS["all_month_s"]
        and all(r["speedup"] >= GOALS["speedup"] for r in (results[0], results[2]))
        and all(r["report_rss_mb"] <= GOALS["rss_mb"] for r in results)
        and all(r["same_numbers"] for r in results)
    )
    print("user_year_per_job lists every job (JSON per job); its speed-up is shown, not a goal")
    service = via_service(uid, env, year, repeat)
    for r in service:
        print(json.dumps(r))
    ok = ok and all(r["ratio"] <= GOALS["service_ratio"] and r["same_numbers"] for r in service)
    print(f"goals {GOALS}: {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


def report_service_only(uid: int, env: dict[str, str], repeat: int) -> int:
    service = via_service(uid, env, int(time.time()) - 365 * 86400, repeat)
    for r in service:
        print(json.dumps(r))
    ok = all(r["ratio"] <= GOALS["service_ratio"] and r["same_numbers"] for r in service)
    print(f"goal service_ratio <= {GOALS['service_ratio']}: {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


def via_service(uid: int, env: dict[str, str], start: int, repeat: int) -> list[dict[str, Any]]:
    """The user's own reports through the report service (as that uid, who may not read
    the option file) against the same reports read directly by root."""
    import pwd

    base = [sys.executable, "-m", "acbslurm", "report", "--format", "json", "--user", str(uid)]
    user_env = {**env, "HOME": "/tmp", "USER": pwd.getpwuid(uid).pw_name}
    out = []
    for name, extra in (("service_user_year", ["--by", "user"]), ("service_per_job", [])):
        direct: list[float] = []
        served: list[float] = []
        same = True
        for i in range(repeat + 1):  # the first pair warms the caches, untimed
            t_end = int(time.time())
            argv = [*base, "--start", f"@{start}", "--end", f"@{t_end}", *extra]
            t0 = time.perf_counter()
            a = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
            t1 = time.perf_counter()
            b = subprocess.run(
                argv, env=user_env, capture_output=True, text=True, check=True, user=uid
            )
            t2 = time.perf_counter()
            mine, theirs = json.loads(a.stdout)["totals"], json.loads(b.stdout)["totals"]
            same = same and mine["jobs"] == theirs["jobs"]
            if i:
                direct.append(t1 - t0)
                served.append(t2 - t1)
        d, v = statistics.median(direct), statistics.median(served)
        out.append(
            {
                "case": name,
                "runs": repeat,
                "direct_s": round(d, 3),
                "service_s": round(v, 3),
                "ratio": round(v / d, 3),
                "same_numbers": same,
            }
        )
    return out


if __name__ == "__main__":
    sys.exit(main())
