"""`acbslurm status` against `squeue` on a queue of held jobs (goal: within 2x at 256).

    sudo .venv/bin/python bench/status_bench.py [--dir SANDBOX_DIR] [-n 256] [--running 0]
        [--big 2048] [--standin 10000] [--repeat 15] [--checkout OTHER_CHECKOUT]

On an UP sandbox, as its user (user1): submits ``-n`` held jobs (``sbatch --hold``; with
``--running K``, K of them one-GPU ``sleep`` jobs that run instead), then times plain
``squeue`` and ``acbslurm status`` (and ``--json``) as user1, each ``--repeat`` times,
and prints the medians, the fastest, the CPU time (user + system, the command and what
it waited for: on a busy machine the steadier number) and the ratio, beside the floor
of any click command (``python -c 'import click'``: no status can be faster). ``--big N``: the
same with N held jobs, to see how both grow.

``--standin N`` (default 10,000) measures what a queue that size costs acbslurm beyond
squeue without submitting it: the real squeue output of the ``-n`` queue (the format
acbslurm asks for) is repeated to N rows with new ids and served by a stand-in
``squeue`` (a shell script that prints the file, as ``ACBSLURM_SLURM_BIN_DIR``); the
time of ``cat`` of that file is the stand-in's own. Its rows are all held, so squeue is
the one Slurm client acbslurm runs. acbslurm's time per job is the slope between ``-n`` and
N rows, set beside real squeue's slope between ``-n`` and ``--big``.

``--checkout DIR`` times another checkout's `acbslurm status` too (say, the commit
before a change: ``git archive COMMIT | tar -x -C DIR``). Every checkout's bytecode is
compiled first (as an installed wheel's is): user1 cannot write ``__pycache__`` in a
root's checkout, and compiling every module on every run would be measured instead.
All jobs of user1 are cancelled before and after.
"""

from __future__ import annotations

import argparse
import os
import pwd
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from acbslurm.sandbox import Sandbox  # noqa: E402
from acbslurm.slurm.jobparse import SQUEUE_FORMAT  # noqa: E402

# `acbslurm status` as the installed command runs it (its console script), with the
# checkout's code: `python -m acbslurm` would add runpy's imports (1-2 ms).
CONSOLE = "import sys; from acbslurm.cli.entry import main; sys.exit(main())"
CLICK_FLOOR = [sys.executable, "-c", "import click"]


class User:
    """Runs commands as the sandbox's user with its environment, timed."""

    def __init__(self, sb: Sandbox) -> None:
        self.sb = sb
        self.pw = pwd.getpwnam(sb.user)
        self.env = sb.user_env()

    def run(self, argv: list[str], extra: dict[str, str] | None = None) -> str:
        r = subprocess.run(
            argv,
            env={**self.env, **(extra or {})},
            user=self.pw.pw_uid,
            group=self.pw.pw_gid,
            extra_groups=[],
            cwd=self.pw.pw_dir,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if r.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed (rc {r.returncode}): {r.stderr[-500:]}")
        return r.stdout

    def timed(self, argv: list[str], extra: dict[str, str] | None = None) -> tuple[float, float]:
        """Wall and CPU ms of one run (CPU: user + system of it and its children)."""
        t0 = time.perf_counter()
        p = subprocess.Popen(
            argv,
            env={**self.env, **(extra or {})},
            user=self.pw.pw_uid,
            group=self.pw.pw_gid,
            extra_groups=[],
            cwd=self.pw.pw_dir,
            stdout=subprocess.DEVNULL,
        )
        _, status, usage = os.wait4(p.pid, 0)
        wall = (time.perf_counter() - t0) * 1000
        p.returncode = os.waitstatus_to_exitcode(status)  # Popen must not wait for it again
        if p.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed (rc {p.returncode})")
        return wall, (usage.ru_utime + usage.ru_stime) * 1000


def submit(user: User, n: int, running: int) -> None:
    """``n`` jobs of user1: ``running`` one-GPU sleeps, the rest held (8 sbatch at once)."""
    held = "sbatch --hold --parsable -J held -o /dev/null --mem=10M --wrap true"
    run = "sbatch --parsable -J run -o /dev/null --mem=10M --gres=gpu:1 --wrap 'sleep 900'"
    script = (
        f"seq {running} | xargs -r -P 8 -I@ {run} >/dev/null && "
        f"seq {n - running} | xargs -r -P 8 -I@ {held} >/dev/null"
    )
    user.run(["bash", "-c", script])
    if running:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            out = user.run(["squeue", "-h", "-t", "running", "-o", "%i"])
            if len(out.split()) >= running:
                break
            time.sleep(1)
        else:
            raise SystemExit(f"{running} jobs did not all start within 300 s")
        time.sleep(5)  # their prologs' load settles


def measure(
    user: User, label: str, argv: list[str], repeat: int, extra: dict[str, str] | None = None
) -> dict[str, float]:
    user.timed(argv, extra)  # warm: the page cache, slurmctld's caches
    runs = [user.timed(argv, extra) for _ in range(repeat)]
    walls, cpus = [w for w, _ in runs], [c for _, c in runs]
    out = {
        "median": statistics.median(walls),
        "min": min(walls),
        "cpu": statistics.median(cpus),
    }
    print(
        f"  {label:<44} median {out['median']:7.1f} ms  min {out['min']:7.1f} ms  "
        f"cpu {out['cpu']:7.1f} ms",
        flush=True,
    )
    return out


def acbslurm(checkout: Path, *args: str) -> tuple[list[str], dict[str, str]]:
    return [sys.executable, "-c", CONSOLE, "status", *args], {"PYTHONPATH": str(checkout)}


def queue_round(
    user: User, checkouts: list[Path], n: int, running: int, repeat: int
) -> dict[str, float]:
    """Times of squeue and of each checkout's status on a queue of ``n`` jobs."""
    user.sb.wait_idle(timeout=300)
    submit(user, n, running)
    known = len(user.run(["squeue", "-h", "-t", "all", "-o", "%i"]).split())
    print(
        f"{n} jobs of {user.sb.user} ({running} running, {n - running} held; the controller "
        f"holds {known}, ended ones included until MinJobAge):",
        flush=True,
    )
    sq = measure(user, "squeue", ["squeue"], repeat)
    # What any click command costs before its own work: Python's start and click's
    # import (status uses the CLI's one parser; CONTRIBUTING.md, "Lean imports").
    floor = measure(user, "python -c 'import click' (the floor)", CLICK_FLOOR, repeat)
    got = {"squeue": sq["median"], "squeue_cpu": sq["cpu"], "floor": floor["median"]}
    for i, checkout in enumerate(checkouts):
        name = "" if i == 0 else f" ({checkout})"
        argv, extra = acbslurm(checkout)
        st = measure(user, f"acbslurm status{name}", argv, repeat, extra)
        js = measure(user, f"acbslurm status --json{name}", [*argv, "--json"], repeat, extra)
        print(
            f"  ratio status/squeue{name}: {st['median'] / sq['median']:.2f} "
            f"(cpu {st['cpu'] / sq['cpu']:.2f}); --json {js['median'] / sq['median']:.2f}",
            flush=True,
        )
        got.setdefault("status", st["median"])
    return got


def standin(user: User, rows: int, repeat: int) -> None:
    """acbslurm's own cost per job, from the real queue's rows and ``rows`` rows of a
    stand-in squeue."""
    recorded = user.run(["squeue", "-h", "-O", SQUEUE_FORMAT]).splitlines()
    if not recorded:
        raise SystemExit("no jobs to record for the stand-in")
    folder = Path(tempfile.mkdtemp(prefix="acbslurm-status-bench-"))
    folder.chmod(0o755)
    times = {}
    for count in (len(recorded), rows):
        lines = []
        for i in range(count):
            # held, as the real queue's held rows: a running row would send acbslurm to
            # the real scontrol for jobs that do not exist
            fields = recorded[i % len(recorded)].split("|", 11)
            fields[0:6] = [str(900000 + i)] * 2 + ["PENDING", "JobHeldUser", "0:00", ""]
            fields[8] = "N/A"
            lines.append("|".join(fields))
        data = folder / f"squeue-{count}.txt"
        data.write_text("\n".join(lines) + "\n")
        bin_dir = folder / f"bin-{count}"
        bin_dir.mkdir()
        stub = bin_dir / "squeue"
        stub.write_text(f"#!/bin/sh\nexec cat {data}\n")
        stub.chmod(0o755)
        data.chmod(0o644)
        bin_dir.chmod(0o755)
        print(f"stand-in squeue, {count} rows (of the real {len(recorded)}):", flush=True)
        cat = measure(user, "cat (the stand-in's own time)", ["cat", str(data)], repeat)
        # acbslurm runs the Slurm clients of ACBSLURM_SLURM_BIN_DIR (the sandbox sets it)
        path = {"ACBSLURM_SLURM_BIN_DIR": str(bin_dir), "PYTHONPATH": str(REPO)}
        argv = [sys.executable, "-c", CONSOLE, "status"]
        st = measure(user, "acbslurm status", argv, repeat, path)
        js = measure(user, "acbslurm status --json", [*argv, "--json"], repeat, path)
        times[count] = (st["median"] - cat["median"], js["median"] - cat["median"])
    (small, big) = (len(recorded), rows)
    for k, what in enumerate(("status", "status --json")):
        slope = (times[big][k] - times[small][k]) / (big - small) * 1000
        print(f"acbslurm {what}: {slope:.1f} us per job beyond squeue's output", flush=True)


def compile_all(checkouts: list[Path]) -> None:
    for checkout in checkouts:
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", str(checkout / "acbslurm")],
            check=True,
            stdout=subprocess.DEVNULL,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dir", default=None)
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("--running", type=int, default=0)
    ap.add_argument("--big", type=int, default=2048, help="0: no second queue")
    ap.add_argument("--standin", type=int, default=10000, help="0: no stand-in")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--checkout", type=Path, default=None)
    args = ap.parse_args()
    sb = Sandbox.load(args.dir)
    user = User(sb)
    checkouts = [REPO] + ([args.checkout.resolve()] if args.checkout else [])
    compile_all(checkouts)
    print(f"Slurm {sb.params.slurm_release}, {os.cpu_count()} CPUs, load {os.getloadavg()}")
    try:
        small = queue_round(user, checkouts, args.n, args.running, args.repeat)
        if args.standin:
            standin(user, args.standin, args.repeat)
        if args.big:
            big = queue_round(user, checkouts, args.big, 0, args.repeat)
            per_job = (big["squeue"] - small["squeue"]) / (args.big - args.n) * 1000
            print(f"squeue: {per_job:.1f} us per job ({args.n} -> {args.big} jobs)")
    finally:
        sb.wait_idle(timeout=300)
    ratio = small["status"] / small["squeue"]
    print(
        f"status/squeue at {args.n} jobs: {ratio:.2f} "
        f"(goal <= 2: {'met' if ratio <= 2 else 'MISSED'}); the floor alone "
        f"(Python and click, no query): {small['floor'] / small['squeue']:.2f}; "
        f"load {os.getloadavg()}"
    )


if __name__ == "__main__":
    main()
