"""What the limits per key NAME cost on the gateway's request path (serve/limits.py).

    python bench/limits_bench.py [--calls 200000] [--repeat 5]

A key with every limit (requests and tokens per minute, high enough never to refuse,
and a GPU-second budget): microseconds per call of ``Limiter.admit`` (before each
request is queued), ``observe`` of a request's and of a lease's ledger line (as the
usage book makes them), ``headers`` (on each answer's start), and ``admit`` for a key
without limits. The per-minute windows hold up to ``--calls`` entries meanwhile, as
they would at that rate. Prints min and median over the repeats.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

from acbslurm.serve.limits import KeyLimits, Limiter


def per_call(f: Callable[[], object], calls: int, repeat: int) -> tuple[float, float]:
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(calls):
            f()
        runs.append((time.perf_counter() - t) / calls * 1e6)
    return min(runs), statistics.median(runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=200_000, help="calls per repeat")
    ap.add_argument("--repeat", type=int, default=5, help="repeats; min and median shown")
    a = ap.parse_args()
    every = KeyLimits(
        "alice", requests_per_minute=10**9, tokens_per_minute=10**12, gpu_seconds=1e12
    )
    lim = Limiter((every,))
    request = {"t": "request", "key": "alice", "prompt_tokens": 30, "completion_tokens": 64}
    lease = {"t": "lease", "by_key": {"alice": 0.5, "bob": 0.2}}
    print(f"load average {os.getloadavg()[0]:.1f}; microseconds per call (min, median)")
    for what, f in (
        ("admit, every limit", lambda: lim.admit("alice", "a")),
        ("observe a request's line", lambda: lim.observe(request)),
        ("observe a lease's line", lambda: lim.observe(lease)),
        ("headers (9)", lambda: lim.headers("alice")),
        ("admit, a key without limits", lambda: lim.admit("bob", "a")),
    ):
        low, mid = per_call(f, a.calls, a.repeat)
        print(f"  {what:<30} {low:7.2f} {mid:7.2f}")


if __name__ == "__main__":
    main()
