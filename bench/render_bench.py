"""Cold `acbslurm render` of the whisper example: a new process each run; prints the median.

    .venv/bin/python bench/render_bench.py [--runs 20] [--against OTHER_CHECKOUT]

Goal: median <= 150 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _render_ms(repo: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(repo)}
    spec = str(repo / "conf/examples/whisper.yaml")  # each its own: keys were added since
    t0 = time.perf_counter()
    argv = [sys.executable, "-m", "acbslurm", "render", spec]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env, cwd=repo)
    return (time.perf_counter() - t0) * 1000


def _report(name: str, times: list[float]) -> None:
    med = statistics.median(times)
    print(
        f"{name}: median {med:.1f} ms, min {min(times):.1f} ms, max {max(times):.1f} ms "
        f"over {len(times)} runs (goal <= 150 ms: {'met' if med <= 150 else 'MISSED'})"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument(
        "--against",
        metavar="CHECKOUT",
        help="also time another checkout of acbslurm (say, the commit before a change), "
        "run for run in turn with this one, so that drift hits both alike",
    )
    args = ap.parse_args()
    repos = [REPO] + ([Path(args.against).resolve()] if args.against else [])
    times: dict[Path, list[float]] = {r: [] for r in repos}
    for i in range(args.runs):
        for repo in repos if i % 2 == 0 else repos[::-1]:
            times[repo].append(_render_ms(repo))
    _report("cold render", times[REPO])
    if args.against:
        _report(f"cold render of {repos[1]}", times[repos[1]])


if __name__ == "__main__":
    main()
