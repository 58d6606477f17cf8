"""Fill the sandbox's real slurmdbd job table with synthetic history for report_bench.py.

Writes N jobs (default 1,000,000) for many users over a year straight into
``<cluster>_job_table`` of the sandbox's MariaDB (as its root, over the private socket),
with extended-insert batches. Mix: 1/2/4/8-GPU and CPU-only jobs, completed, failed,
cancelled (some before they started), timeouts, OOM, node failures, arrays, requeued jobs
(an extra REQUEUED row with the same id), suspended time and a few still running.
Every synthetic row is named ``acbslurm-bench`` so ``--clear`` can remove exactly them.

``--comments`` gives the synthetic rows the AdminComment acbslurm's hooks write (devices,
and a pool's usage on some; ``bench/report_comments.py``), or takes it away: only the
comments change, so report_bench.py can time the same rows each way.

    python bench/report_fill.py [--dir SANDBOX] [--jobs 1000000] [--users 300] [--clear]
    python bench/report_fill.py --comments on|devices|off [--pool-every 50]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time

import MySQLdb

from acbslurm.sandbox import Sandbox

MARK = "acbslurm-bench"
FIRST_ID = 5_000_000
FIRST_UID = 20_000
YEAR = 365 * 86400
COLS = (
    "id_job",
    "id_array_job",
    "id_array_task",
    "id_user",
    "id_group",
    "id_assoc",
    "account",
    "`partition`",
    "state",
    "time_submit",
    "time_eligible",
    "time_start",
    "time_end",
    "time_suspended",
    "tres_alloc",
    "tres_req",
    "job_name",
    "cpus_req",
    "mem_req",
    "nodes_alloc",
    "nodelist",
    "id_resv",
    "id_wckey",
    "het_job_id",
    "het_job_offset",
    "state_reason_prev",
    "priority",
    "timelimit",
)
# (state, weight) of finished jobs; 1024 marks a row closed by a requeue.
STATES = [(3, 70), (5, 10), (4, 12), (6, 5), (11, 2), (7, 1)]
GPUS = [(0, 5), (1, 45), (2, 25), (4, 15), (8, 10)]


def weighted(rng: random.Random, pairs: list[tuple[int, int]]) -> int:
    return rng.choices([p[0] for p in pairs], [p[1] for p in pairs])[0]


def rows(n: int, users: int, now: int, seed: int):  # type: ignore[no-untyped-def]
    rng = random.Random(seed)
    # Zipf-like activity: a few heavy users, a long tail.
    weights = [1 / (k + 1) ** 0.9 for k in range(users)]
    uids = [FIRST_UID + k for k in range(users)]
    job_id = FIRST_ID
    made = 0
    while made < n:
        uid = rng.choices(uids, weights)[0]
        acct = f"lab{uid % 20:02d}"
        part = "gpu" if rng.random() < 0.8 else "debug"
        gpus = weighted(rng, GPUS)
        cpus = max(1, gpus * 4 or 2)
        mem = cpus * 4000
        tres_req = f"1={cpus},2={mem},4=1,5={cpus}" + (f",1001={gpus}" if gpus else "")
        submit = now - rng.randint(3600, YEAR)
        array = 1 if rng.random() > 0.05 else rng.randint(2, 20)
        master = job_id
        for task in range(array):
            if made >= n:
                break
            wait = int(rng.expovariate(1 / 600)) if rng.random() < 0.9 else rng.randint(0, 86400)
            start = submit + wait
            dur = min(int(rng.lognormvariate(7.5, 1.5)), 3 * 86400)
            end = start + dur
            state = weighted(rng, STATES)
            susp = rng.randint(60, max(61, dur // 2)) if rng.random() < 0.003 else 0
            alloc = tres_req
            if state == 4 and rng.random() < 0.3:  # cancelled while pending
                start, end, alloc = 0, submit + wait, ""
            elif end >= now:
                state, end, susp = 1, 0, 0
            arr_job = master if array > 1 else 0
            arr_task = task if array > 1 else 4294967294
            common = (
                uid,
                uid,
                0,
                acct,
                part,
            )
            if alloc and end and rng.random() < 0.01:
                # An earlier run of the same job id that was requeued.
                run1_end = start + max(1, dur // 3)
                yield (
                    job_id,
                    arr_job,
                    arr_task,
                    *common,
                    1024,
                    submit - 1,
                    submit - 1,
                    start - 1,
                    run1_end,
                    0,
                    alloc,
                    tres_req,
                    MARK,
                    cpus,
                    mem,
                    1,
                    "node1",
                    0,
                    0,
                    0,
                    4294967294,
                    0,
                    1000,
                    1440,
                )
                start = run1_end + rng.randint(1, 600)
                end = max(end, start + 1)
                made += 1
            yield (
                job_id,
                arr_job,
                arr_task,
                *common,
                state,
                submit,
                submit,
                start,
                end,
                susp,
                alloc,
                tres_req,
                MARK,
                cpus,
                mem,
                1 if alloc else 0,
                "node1" if alloc else "None assigned",
                0,
                0,
                0,
                4294967294,
                0,
                1000,
                1440,
            )
            made += 1
            job_id += 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=None, help="sandbox directory (default: the default one)")
    ap.add_argument("--jobs", type=int, default=1_000_000, help="rows to write")
    ap.add_argument("--users", type=int, default=300, help="distinct synthetic users")
    ap.add_argument("--batch", type=int, default=5000, help="rows per INSERT statement")
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--clear", action="store_true", help="only remove earlier synthetic rows")
    ap.add_argument(
        "--comments",
        choices=("on", "devices", "off"),
        help="only give the synthetic rows acbslurm's AdminComment: devices and usage, "
        "devices only, or none",
    )
    ap.add_argument(
        "--pool-every", type=int, default=50, help="one GPU job in N gets a pool's usage"
    )
    a = ap.parse_args()
    sb = Sandbox.load(a.dir)
    table = f"`{sb.params.cluster}_job_table`"
    conn = MySQLdb.connect(
        unix_socket=str(sb.layout.mysql_socket), user="root", database="slurm_acct_db"
    )
    cur = conn.cursor()
    if a.comments:
        from report_comments import set_comments

        print(set_comments(conn, table, MARK, a.comments, max(1, a.pool_every)))
        return 0
    t0 = time.monotonic()
    cur.execute(f"DELETE FROM {table} WHERE job_name = %s", (MARK,))
    conn.commit()
    print(f"removed {cur.rowcount} earlier synthetic rows in {time.monotonic() - t0:.1f} s")
    if a.clear:
        return 0
    now = int(time.time())
    sql = f"INSERT INTO {table} ({', '.join(COLS)}) VALUES ({', '.join(['%s'] * len(COLS))})"
    t0 = time.monotonic()
    batch: list[tuple[object, ...]] = []
    count = 0
    per_user: dict[int, int] = {}
    for r in rows(a.jobs, a.users, now, a.seed):
        batch.append(r)
        per_user[r[3]] = per_user.get(r[3], 0) + 1  # type: ignore[index]
        if len(batch) >= a.batch:
            cur.executemany(sql, batch)  # MySQLdb turns this into one extended INSERT
            conn.commit()
            count += len(batch)
            batch.clear()
            if count % 100_000 == 0:
                print(f"  {count:>9,} rows  {time.monotonic() - t0:6.1f} s", flush=True)
    if batch:
        cur.executemany(sql, batch)
        conn.commit()
        count += len(batch)
    took = time.monotonic() - t0
    cur.execute(f"ANALYZE TABLE {table}")
    cur.fetchall()
    top = sorted(per_user.items(), key=lambda kv: -kv[1])
    meta = {
        "rows": count,
        "users": a.users,
        "now": now,
        "top_users": top[:5],
        "median_user": top[len(top) // 2],
    }
    (sb.layout.state / "bench-fill.json").write_text(json.dumps(meta, indent=1))
    print(f"wrote {count:,} rows in {took:.1f} s ({count / took:,.0f} rows/s)")
    print(f"busiest users (uid, rows): {top[:3]}; median user {top[len(top) // 2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
