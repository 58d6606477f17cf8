"""Prolog and epilog wall time per job on the sandbox (goal: median <= 100 ms each).

Runs the sandbox's real hook wrappers (the files slurm.conf names) the way slurmd does:
as root, with the prolog environment of a real running GPU job, so the prolog asks the
real slurmctld (scontrol) and the epilog sweeps user1's real rootless daemon. Records go
to a scratch directory so the running job's own record is untouched.

    python bench/hooks_bench.py [--dir SANDBOX_DIR] [-n 30] [--checkout OTHER_CHECKOUT]

On a sandbox of several nodes (`sandbox up --nodes N`) the hooks run as the node the job
landed on (its own inventory, records and runtime directories).

``--checkout`` times the hooks of another checkout of acbslurm (say, the commit before a
change) against the same running job, through copies of the sandbox's wrappers.

Besides wall time it prints each hook's CPU time (user + system of the hook and of the
children it waited for, scontrol; from wait4's rusage). Wall time grows with the other
work on the machine; CPU time much less, so on a busy machine it is what tells two
checkouts or two Dockers apart (the daemons' own work is not in it).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from acbslurm.sandbox import Sandbox


def timed(argv: list[str], env: dict[str, str], cpu: list[float]) -> float:
    """Wall ms of one run of ``argv``; appends its CPU ms to ``cpu``."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)
    wall = (time.perf_counter() - t0) * 1000
    p.returncode = os.waitstatus_to_exitcode(status)  # Popen must not wait for it again
    if p.returncode != 0:
        raise SystemExit(f"{argv[0]} failed (rc {p.returncode})")
    cpu.append((usage.ru_utime + usage.ru_stime) * 1000)
    return wall


def wrappers_for(libexec: Path, checkout: Path, config: Path) -> Path:
    """Copies of the sandbox's hook wrappers that import acbslurm from ``checkout``, with
    the sandbox's settings less those that checkout does not know (an older one refuses
    unknown settings)."""
    import json

    known = json.loads(
        subprocess.run(
            [sys.executable, "-c", "import sys, json, dataclasses; sys.path.insert(0, sys.argv[1]);"
             " from acbslurm.config import Settings\n"
             "try: from acbslurm.values import field_names\n"  # a checkout with it
             "except ImportError: names = [f.name for f in dataclasses.fields(Settings)]\n"
             "else: names = list(field_names(Settings))\n"
             "print(json.dumps(names))", str(checkout)],
            check=True, capture_output=True, text=True,
        ).stdout
    )  # fmt: skip
    out = Path(tempfile.mkdtemp(prefix="acbslurm-hooks-"))
    settings = {k: v for k, v in json.loads(config.read_text()).items() if k in known}
    (out / "settings.json").write_text(json.dumps(settings))
    # A checkout from before the hooks were split by Slurm context has them in hooks/entry.py.
    split = (checkout / "acbslurm" / "hooks" / "prolog.py").exists()
    for name in ("acbslurm-prolog", "acbslurm-epilog"):
        lines = (libexec / name).read_text().splitlines()
        text = "\n".join(
            f"sys.path.insert(0, {str(checkout)!r})"
            if ln.startswith("sys.path.insert")
            else f"os.environ['ACBSLURM_CONFIG'] = {str(out / 'settings.json')!r}"
            if ln.startswith('os.environ["ACBSLURM_CONFIG"]')
            else re.sub(
                r"^from acbslurm\.hooks\.\w+ import", "from acbslurm.hooks.entry import", ln
            )
            if not split
            else ln
            for ln in lines
        )
        (out / name).write_text(text + "\n")
        (out / name).chmod(0o755)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=os.environ.get("ACBSLURM_SANDBOX_DIR"))
    ap.add_argument("-n", type=int, default=30)
    ap.add_argument("--checkout", default=None, help="time this checkout's hooks instead")
    args = ap.parse_args()
    sb = Sandbox.load(args.dir)
    libexec = sb.layout.libexec
    if args.checkout:
        libexec = wrappers_for(libexec, Path(args.checkout).resolve(), sb.layout.acbslurm_conf)
    cpu: dict[str, list[float]] = {"prolog": [], "epilog": []}
    job = sb.run_as_user(
        ["sbatch", "--parsable", "--gres=gpu:1", "-o", "/dev/null", "--wrap", "sleep 300"]
    ).stdout.strip()
    try:
        deadline = time.monotonic() + 30
        while "JobState=RUNNING" not in sb.run_slurm(["scontrol", "show", "job", job]).stdout:
            if time.monotonic() > deadline:
                raise SystemExit(f"job {job} did not start")
            time.sleep(0.2)
        shown = sb.run_slurm(["scontrol", "show", "job", "-d", "-o", job]).stdout
        gpu_idx = shown.split("IDX:")[1].split(")")[0]
        # The node the job runs on, as slurmd names it to its prolog: on a sandbox of
        # several nodes (vm-1, vm-2...) each has its own inventory (gpus-<node>.json).
        node = shown.split(" NodeList=", 1)[1].split()[0]
        with tempfile.TemporaryDirectory() as records:
            env = {
                "PATH": os.environ["PATH"],
                **sb.env(),
                "ACBSLURM_RECORD_DIR": records,
                "SLURM_JOB_ID": job,
                "SLURM_JOB_UID": str(sb.uid),
                "SLURM_JOB_USER": sb.user,
                "SLURM_JOB_GPUS": gpu_idx,
                "CUDA_VISIBLE_DEVICES": gpu_idx,
                "SLURMD_NODENAME": node,
                "SLURM_SCRIPT_CONTEXT": "prolog_slurmd",
            }
            pro, epi = [], []
            for _ in range(args.n):
                pro.append(timed([str(libexec / "acbslurm-prolog")], env, cpu["prolog"]))
                assert (Path(records) / f"{job}.json").exists()
                epi.append(timed([str(libexec / "acbslurm-epilog")], env, cpu["epilog"]))
                assert not (Path(records) / f"{job}.json").exists()
    finally:
        sb.run_slurm(["scancel", job])
    for name, xs in (("prolog", pro), ("epilog", epi)):
        xs.sort()
        print(
            f"{name}: median {statistics.median(xs):.1f} ms, "
            f"p90 {xs[int(0.9 * (len(xs) - 1))]:.1f} ms, min {xs[0]:.1f} ms (n={len(xs)}); "
            f"CPU median {statistics.median(cpu[name]):.1f} ms"
        )
    total = statistics.median([p + e for p, e in zip(pro, epi, strict=True)])
    print(f"prolog+epilog per job: median {total:.1f} ms (goal: each <= 100 ms)")


if __name__ == "__main__":
    main()
