"""bench/report_comments.py: the synthetic jobs' devices are a real cluster's (no GPU in
two jobs at once), in the words the report reads, so that the million-job bench times
the report on the comments it meets at a site."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

from scriptmodule import load

from acbslurm.accounting.gpuseconds import devices_text, pool_usage
from acbslurm.slurm.gpu_history import parse_gpus

ROOT = Path(__file__).resolve().parents[3]


def test_no_gpu_is_in_two_jobs_at_once_and_the_report_reads_every_word() -> None:
    rc = load(ROOT / "bench" / "report_comments.py")
    rng = random.Random(3)
    rows = []
    for i in range(3000):
        start = rng.randint(1, 100_000)
        end = 0 if i % 500 == 0 else start + rng.randint(1, 5000)  # a few still running
        k = rng.choice((0, 1, 2, 4, 8))
        rows.append((i, 7000 + i, start, end, f"1=4,2=16000,4=1,1001={k}" if k else "1=2"))
    got = dict(rc.comments(rows, "on", 10, 200_000))
    by_row = {r[0]: r for r in rows}
    held: dict[str, list[tuple[int, int]]] = {}
    for inx, comment in got.items():
        _, job, start, end, tres = by_row[inx]
        gpus = parse_gpus(comment)
        assert len(gpus) == int(tres.rpartition("1001=")[2])
        assert devices_text(comment)
        for g in gpus:
            held.setdefault(g.uuid, []).append((start, end or 200_000))
        assert (pool_usage(comment) is not None) == (job % 10 == 0 and end > 0)
    assert len(got) == sum(1 for r in rows if "1001=" in r[4])
    for spans in held.values():
        spans.sort()
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
    assert not any("acbslurm:usage=" in c for _, c in rc.comments(rows, "devices", 10, 200_000))
