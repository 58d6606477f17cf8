"""`acbslurm run` start-to-first-output against a plain `docker run` of the same image.

Measured where it matters: inside a real Slurm job of the sandbox holding one GPU, as
the job's user. Both start the same container (that GPU by device request, `echo`)
in the user's rootless daemon; the time is from spawning the command to the first byte
on its stdout, interleaved so drift hits both alike. Goal: median ratio <= 1.10 (with the
container joined to the job's cgroups, as the sandbox runs it).
`acbslurm run` is the environment's console script, as users type it (``python -m
acbslurm`` would add runpy's import, about 3 ms, that they never pay).

    python bench/run_bench.py [--dir SANDBOX_DIR] [-n 15]
"""

from __future__ import annotations

import argparse
import os
import select
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
IMAGE = "acbslurm/busybox:latest"


def first_output_ms(argv: list[str]) -> float:
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert p.stdout is not None
    select.select([p.stdout], [], [], 60)
    first = os.read(p.stdout.fileno(), 1)
    t = (time.perf_counter() - t0) * 1000
    p.wait(60)
    if not first or p.returncode != 0:
        raise SystemExit(f"{argv[:5]}... failed (rc {p.returncode})")
    return t


def inner(n: int) -> None:
    """Runs in the job: prints the two medians."""
    uuid = os.environ["ACBSLURM_GPU_UUIDS"].split(",")[0]
    plain = ["docker", "run", "--rm", "--init", "--gpus", f"device={uuid}", IMAGE]
    script = Path(sys.executable).with_name("acbslurm")
    entry = [str(script)] if script.exists() else [sys.executable, "-m", "acbslurm"]
    ours = [*entry, "run", IMAGE]
    cmd = ["echo", "hello"]
    first_output_ms(plain + cmd)  # warm caches
    first_output_ms(ours + cmd)
    d, a = [], []
    for _ in range(n):
        d.append(first_output_ms(plain + cmd))
        a.append(first_output_ms(ours + cmd))
    md, ma = statistics.median(d), statistics.median(a)
    print(f"docker run --rm --init --gpus device=UUID: median {md:.0f} ms (min {min(d):.0f})")
    print(f"acbslurm run:                             median {ma:.0f} ms (min {min(a):.0f})")
    print(f"ratio acbslurm/docker: {ma / md:.2f} (goal <= 1.10), n={n}, in Slurm job")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=os.environ.get("ACBSLURM_SANDBOX_DIR"))
    ap.add_argument("-n", type=int, default=15)
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inner:
        inner(args.n)
        return
    sys.path.insert(0, str(REPO))
    import tempfile

    from acbslurm.sandbox import Sandbox

    sb = Sandbox.load(args.dir)
    # The job's user cannot write the checkout's __pycache__: modules changed since root
    # last compiled them would be compiled on every run (25 ms for 7 modules, measured),
    # which an installed package (pip compiles at install) never pays.
    import compileall

    compileall.compile_dir(str(REPO / "acbslurm"), quiet=1)
    with tempfile.TemporaryDirectory() as d:
        os.chmod(d, 0o777)
        out = Path(d) / "bench.out"
        job = sb.run_as_user(
            [
                "sbatch",
                "--parsable",
                "--gres=gpu:1",
                "-o",
                str(out),
                "--wrap",
                f"{sys.executable} {Path(__file__).resolve()} --inner -n {args.n}",
            ],
            extra_env={"PYTHONPATH": str(REPO)},
        ).stdout.strip()
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            state = sb.run_slurm(["scontrol", "show", "job", "-o", job]).stdout
            if "JobState=COMPLETED" in state or "JobState=FAILED" in state:
                break
            time.sleep(1)
        print(out.read_text(), end="")


if __name__ == "__main__":
    main()
