"""`acbslurm run` start-to-first-output against a plain `docker run` of the same image.

Both start the same container (one GPU by device request, `echo`) in the sandbox user's
rootless daemon, as that user; the time is from spawning the command to the first byte
on its stdout. `acbslurm run` reads a job record made for the benchmark (as the prolog
would), so it takes its full path: record, device request, labels, limits check.
Goal: median ratio <= 1.15.

    python bench/run_bench.py [--dir SANDBOX_DIR] [-n 15]
"""

from __future__ import annotations

import argparse
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from acbslurm.hooks.record import JobRecord, write_record  # noqa: E402
from acbslurm.sandbox import Sandbox  # noqa: E402

IMAGE = "acbslurm/busybox:latest"


def first_output_ms(argv: list[str], env: dict[str, str], uid: int) -> float:
    t0 = time.perf_counter()
    p = subprocess.Popen(
        argv, env=env, user=uid, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd="/"
    )
    assert p.stdout is not None
    select.select([p.stdout], [], [], 60)
    first = p.stdout.read1(1)  # type: ignore[attr-defined]
    t = (time.perf_counter() - t0) * 1000
    p.wait(60)
    if not first or p.returncode != 0:
        raise SystemExit(f"{argv[:4]}... failed (rc {p.returncode})")
    return t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=os.environ.get("ACBSLURM_SANDBOX_DIR"))
    ap.add_argument("-n", type=int, default=15)
    args = ap.parse_args()
    sb = Sandbox.load(args.dir)
    uuid = sb.gpus[0].uuid
    with tempfile.TemporaryDirectory() as records:
        os.chmod(records, 0o755)
        write_record(records, JobRecord("999999", sb.user, sb.uid, "bench", [0], [uuid], [0]))
        env = {
            **sb.user_env(),
            "PYTHONPATH": str(REPO),
            "ACBSLURM_RECORD_DIR": records,
            "SLURM_JOB_ID": "999999",
        }
        plain = ["docker", "run", "--rm", "--init", "--gpus", f"device={uuid}", IMAGE]
        ours = [sys.executable, "-m", "acbslurm", "run", IMAGE]
        cmd = ["echo", "hello"]
        first_output_ms(plain + cmd, env, sb.uid)  # warm the page cache
        first_output_ms(ours + cmd, env, sb.uid)
        d, a = [], []
        for _ in range(args.n):  # interleaved so drift hits both alike
            d.append(first_output_ms(plain + cmd, env, sb.uid))
            a.append(first_output_ms(ours + cmd, env, sb.uid))
    md, ma = statistics.median(d), statistics.median(a)
    print(f"docker run --rm --init --gpus device=UUID: median {md:.0f} ms (min {min(d):.0f})")
    print(f"acbslurm run:                             median {ma:.0f} ms (min {min(a):.0f})")
    print(f"ratio acbslurm/docker: {ma / md:.2f} (goal <= 1.15), n={args.n}")


if __name__ == "__main__":
    main()
