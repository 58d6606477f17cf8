"""The AdminComment acbslurm's hooks would have written on report_fill.py's synthetic rows.

Every job that held GPUs gets the prolog's word for its devices. The devices come from a
cluster of 8-GPU nodes, each job placed on a node with enough GPUs free for its whole
run, in start order (first fit; a node is added when none has room), so no GPU is ever
in two jobs at once, as on a real cluster. One GPU job in ``pool_every`` also gets a
pool's usage word (three key names sharing 60 % of the allocation). ``mode``: ``on``
(devices and usage), ``devices`` (devices only) or ``off`` (no comment). Only the
comments change: report_bench.py times the same rows each way.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Iterator
from typing import Any

GPUS_PER_NODE = 8


def _gpus(tres: str) -> int:
    for item in (tres or "").split(","):
        if item.startswith("1001="):
            return int(item[5:])
    return 0


def _uuid(node: int, index: int) -> str:
    return f"GPU-{node:08x}-0000-4000-8000-{index:012x}"


def _usage(node: str, gpus: int, seconds: int, job: int) -> str:
    leased = gpus * seconds * 0.6
    shares = (("alice", "llama-8b", 97, 0.5), ("ci-bot", "llama-8b", 31, 0.3))
    parts = [f"acbslurm:usage={node}", f"leased={leased:.3f}"]
    for name, model, mod, share in (*shares, ("bob", "whisper", 13, 0.2)):
        parts.append(f"{name},{model}={job % mod + 1},41200,88100,{leased * share:.3f}")
    return ";".join(parts)


class Cluster:
    """Free GPUs per node, and the running jobs' ends (first fit in start order)."""

    def __init__(self) -> None:
        self.free: list[list[int]] = []
        self.by_free: list[set[int]] = [set() for _ in range(GPUS_PER_NODE + 1)]
        self.ends: list[tuple[int, int, list[int]]] = []

    def _set_free(self, node: int, free: list[int], old: int) -> None:
        self.by_free[old].discard(node)
        self.free[node] = free
        self.by_free[len(free)].add(node)

    def place(self, start: int, end: int, k: int) -> tuple[int, list[int]]:
        while self.ends and self.ends[0][0] <= start:
            _, node, back = heapq.heappop(self.ends)
            old = len(self.free[node])
            self._set_free(node, sorted(self.free[node] + back), old)
        node = next((min(s) for s in self.by_free[k:] if s), -1)
        if node < 0:
            node = len(self.free)
            self.free.append(list(range(GPUS_PER_NODE)))
            self.by_free[GPUS_PER_NODE].add(node)
        have = self.free[node]
        taken, rest = have[:k], have[k:]
        self._set_free(node, rest, len(have))
        heapq.heappush(self.ends, (end, node, taken))
        return node, taken


def comments(
    rows: list[tuple[int, int, int, int, str]], mode: str, pool_every: int, now: int
) -> Iterator[tuple[int, str]]:
    """(job_db_inx, comment) for each (job_db_inx, id_job, start, end, tres) row."""
    cluster = Cluster()
    for inx, job, start, end, tres in sorted(rows, key=lambda r: r[2]):
        k = _gpus(tres)
        if not k or not start or k > GPUS_PER_NODE:
            continue
        node, taken = cluster.place(start, end or now, k)
        name = f"gpu{node:03d}"
        words = ["acbslurm:gpus=" + ",".join(f"{name}:{i}={_uuid(node, i)}" for i in taken)]
        if mode == "on" and job % pool_every == 0 and end:
            words.append(_usage(name, k, max(0, end - start), job))
        yield inx, " ".join(words)


def set_comments(conn: Any, table: str, mark: str, mode: str, pool_every: int) -> str:
    """Write the comments of ``mode``; a line saying what was done."""
    cur = conn.cursor()
    t0 = time.monotonic()
    cur.execute(f"UPDATE {table} SET admin_comment = NULL WHERE job_name = %s", (mark,))
    if mode == "off":
        conn.commit()
        return f"comments off: {cur.rowcount:,} rows cleared in {time.monotonic() - t0:.1f} s"
    cur.execute(
        f"SELECT job_db_inx, id_job, time_start, time_end, tres_alloc FROM {table} "
        "WHERE job_name = %s AND time_start > 0",
        (mark,),
    )
    rows = list(cur.fetchall())
    cur.execute(
        "CREATE TEMPORARY TABLE bench_comment "
        "(job_db_inx BIGINT UNSIGNED PRIMARY KEY, comment TEXT) ENGINE=InnoDB"
    )
    batch: list[tuple[int, str]] = []
    made = pools = 0
    for pair in comments(rows, mode, pool_every, int(time.time())):
        batch.append(pair)
        made += 1
        pools += "acbslurm:usage=" in pair[1]
        if len(batch) >= 5000:
            cur.executemany("INSERT INTO bench_comment VALUES (%s, %s)", batch)
            batch.clear()
    if batch:
        cur.executemany("INSERT INTO bench_comment VALUES (%s, %s)", batch)
    cur.execute(
        f"UPDATE {table} t JOIN bench_comment c USING (job_db_inx) SET t.admin_comment = c.comment"
    )
    cur.execute("DROP TEMPORARY TABLE bench_comment")
    conn.commit()
    return (
        f"comments {mode}: {made:,} GPU jobs given their devices ({pools:,} a pool's usage) "
        f"in {time.monotonic() - t0:.1f} s"
    )
