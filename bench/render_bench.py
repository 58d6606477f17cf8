"""Cold `acbslurm render` of the whisper example: a new process each run; prints the median.

    .venv/bin/python bench/render_bench.py [--runs 20]

Goal (issue 3): median <= 150 ms.
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "acbslurm", "render", str(REPO / "conf/examples/whisper.yaml")]
    times = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env)
        times.append((time.perf_counter() - t0) * 1000)
    med = statistics.median(times)
    print(
        f"cold render: median {med:.1f} ms, min {min(times):.1f} ms, max {max(times):.1f} ms "
        f"over {args.runs} runs (goal <= 150 ms: {'met' if med <= 150 else 'MISSED'})"
    )


if __name__ == "__main__":
    main()
