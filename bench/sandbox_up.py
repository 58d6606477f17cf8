"""Times the sandbox's life cycle on this machine and prints the numbers.

    sudo .venv/bin/python bench/sandbox_up.py [--runs 3]

Uses its own directory and ports, so a sandbox already running is not disturbed.
Goals (issue 2): cold `up` within 90 s, a second `up` within 5 s.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path("/var/lib/acbslurm/sb-bench")
PORT_BASE = 21817


def acbslurm(*args: str) -> float:
    t0 = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "acbslurm", "sandbox", *args, "--dir", str(ROOT)],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    acbslurm("down")
    shutil.rmtree(ROOT, ignore_errors=True)
    fresh = acbslurm("up", "--gpus", "2", "--port-base", str(PORT_BASE))
    second = [acbslurm("up")]
    downs, colds = [], []
    for _ in range(args.runs):
        downs.append(acbslurm("down"))
        colds.append(acbslurm("up"))
        second.append(acbslurm("up"))
    acbslurm("down")
    shutil.rmtree(ROOT, ignore_errors=True)
    print(f"fresh up (new directory, database created): {fresh:6.1f} s   goal <= 90 s")
    print(f"cold up (state kept), median of {args.runs}:        {statistics.median(colds):6.1f} s")
    print(
        f"second up (only checks), median of {len(second)}:      {statistics.median(second):6.2f} s"
        "   goal <= 5 s"
    )
    print(f"down, median of {args.runs}:                        {statistics.median(downs):6.1f} s")


if __name__ == "__main__":
    main()
