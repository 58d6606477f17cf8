"""Times the sandbox's life cycle on this machine and prints the numbers.

    sudo .venv/bin/python bench/sandbox_up.py [--runs 3] [--nodes 2] [--dir D --port-base P]

Uses its own directory and ports, so a sandbox already running is not disturbed.
Goals: cold `up` within 90 s, a second `up` within 5 s.
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
_root = ROOT  # --dir


def acbslurm(*args: str) -> float:
    t0 = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "acbslurm", "sandbox", *args, "--dir", str(_root)],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--nodes", type=int, default=1, help="slurmd daemons (sandbox up --nodes)")
    ap.add_argument("--dir", default=str(ROOT), help="the sandbox directory (removed after)")
    ap.add_argument("--port-base", type=int, default=PORT_BASE)
    args = ap.parse_args()
    global _root
    _root = Path(args.dir)
    acbslurm("down")
    shutil.rmtree(_root, ignore_errors=True)
    shape = ["--gpus", "2", "--nodes", str(args.nodes), "--port-base", str(args.port_base)]
    fresh = acbslurm("up", *shape)
    print(f"{args.nodes} node(s) x 2 GPUs at {_root}")
    second = [acbslurm("up")]
    downs, colds = [], []
    for _ in range(args.runs):
        downs.append(acbslurm("down"))
        colds.append(acbslurm("up"))
        second.append(acbslurm("up"))
    acbslurm("down")
    shutil.rmtree(_root, ignore_errors=True)
    print(f"fresh up (new directory, database created): {fresh:6.1f} s   goal <= 90 s")
    print(f"cold up (state kept), median of {args.runs}:        {statistics.median(colds):6.1f} s")
    print(
        f"second up (only checks), median of {len(second)}:      {statistics.median(second):6.2f} s"
        "   goal <= 5 s"
    )
    print(f"down, median of {args.runs}:                        {statistics.median(downs):6.1f} s")


if __name__ == "__main__":
    main()
