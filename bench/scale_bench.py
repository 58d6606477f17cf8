"""A busy cluster's Monday morning: arrays of one-GPU jobs, three ways, on many nodes.

    sudo .venv/bin/python bench/scale_bench.py [--nodes 16] [--gpus 8] [--tasks 256]
        [--throttle 16] [--ways plain,docker,acbslurm] [--dir D] [--port-base P] [--keep]

Brings up a sandbox of its own (``--dir``, default /var/lib/acbslurm/scale; ports from
``--port-base``, so a sandbox already running is not disturbed), with ``--nodes`` slurmd
of ``--gpus`` emulated GPUs each, and submits as its user (user1), one after the other,
an array of ``--tasks`` one-GPU jobs each way:

* ``plain``: the job runs ``true``;
* ``docker``: ``docker run --rm --gpus device=UUID IMAGE true`` in the user's rootless
  daemon, UUID the job's GPU (the write-up's way: the job script picks the GPU);
* ``acbslurm``: ``acbslurm run IMAGE -- true`` (the job's GPU from the prolog's record).

Each array runs unthrottled and at ``%throttle``. For each it prints the wall time from
the submit to the last task's end, jobs per minute, the prolog's and the epilog's times
(median, 95th percentile and largest, from the sandbox's hook-times log, which its hook
wrappers write: the hook's own time, without the interpreter's start), and the ratio
to the plain-docker array. Then the checks: every task COMPLETED, no container and no
job record left, no node drained, and the report's GPU overlaps (none expected).
Last, the memory of the sandbox's daemons (their resident set) and the machine's load.

All the sandbox's nodes share one rootless daemon of user1, so every container start
of the array meets every other in one daemon: harder than a real cluster, whose nodes
each have their own.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from acbslurm.sandbox import Sandbox  # noqa: E402

IMAGE = "acbslurm/busybox:latest"
WAYS = ("plain", "docker", "acbslurm")


def up(args: argparse.Namespace) -> Sandbox:
    env = {**os.environ, "ACBSLURM_SANDBOX_PORT_BASE": str(args.port_base)}
    argv = [sys.executable, "-m", "acbslurm", "sandbox", "up", "--dir", args.dir]
    argv += ["--nodes", str(args.nodes), "--gpus", str(args.gpus)]
    t0 = time.monotonic()
    subprocess.run(argv, check=True, env=env, stdout=subprocess.DEVNULL)
    print(f"sandbox: {args.nodes} nodes x {args.gpus} GPUs up in {time.monotonic() - t0:.1f} s")
    return Sandbox.load(args.dir)


def uuid_files(sb: Sandbox, folder: Path) -> None:
    """uuids-<node>.txt: line i is the UUID of the node's GPU of index i, for the
    `docker` way's job script (a `sed -n`, no Python in the job)."""
    from acbslurm.sandbox import gpus

    for node, inv in gpus.by_node(sb.layout, sb.params).items():
        lines = [g.uuid for g in sorted(inv, key=lambda g: g.minor)]  # gres.conf's order
        (folder / f"uuids-{node}.txt").write_text("\n".join(lines) + "\n")


def job_body(way: str, sb: Sandbox, folder: Path) -> str:
    if way == "plain":
        return "true"
    if way == "docker":
        host = f"unix://{sb.layout.run}/{sb.user}/docker.sock"
        pick = f'sed -n "$((SLURM_JOB_GPUS + 1))p" {folder}/uuids-$SLURMD_NODENAME.txt'
        return (
            f"export DOCKER_HOST={host}; "
            f'exec docker run --rm --gpus "device=$({pick})" {IMAGE} true'
        )
    return shlex.join([sys.executable, "-m", "acbslurm", "run", "--pull", "never", IMAGE, "true"])


def hook_times(sb: Sandbox, offset: int) -> tuple[dict[str, list[float]], int]:
    """Milliseconds per hook (prolog, epilog) from the hook-times log past ``offset``,
    and the log's new end."""
    path = sb.layout.log_file("hook-times")
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            text = f.read().decode()
    except FileNotFoundError:
        return {}, offset
    out: dict[str, list[float]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 4:
            out.setdefault(parts[0].removeprefix("acbslurm-"), []).append(float(parts[3]))
    return out, offset + len(text.encode())


def spread(ms: list[float]) -> str:
    """``median/p95/max ms (n)`` of ``ms``."""
    if not ms:
        return "-"
    s = sorted(ms)
    p95 = s[min(len(s) - 1, round(0.95 * (len(s) - 1)))]
    return f"{s[len(s) // 2]:.0f}/{p95:.0f}/{s[-1]:.0f} ms ({len(s)})"


def run_array(sb: Sandbox, way: str, tasks: int, throttle: int, folder: Path) -> dict[str, object]:
    """Submit the array, wait until no task is left in the queue; its wall time and
    the hooks' times meanwhile."""
    _, offset = hook_times(sb, 0)
    script = folder / f"{way}.sh"
    script.write_text("#!/bin/bash\n" + job_body(way, sb, folder) + "\n")
    script.chmod(0o755)
    spec = f"0-{tasks - 1}" + (f"%{throttle}" if throttle else "")
    t0 = time.monotonic()
    out = sb.run_as_user(
        ["sbatch", "--parsable", f"--array={spec}", "--gres=gpu:1", "-o", f"{folder}/%x-%A_%a.out",
         "-J", way, str(script)],
        extra_env={"PYTHONPATH": str(REPO)},
    )  # fmt: skip
    array = out.stdout.strip().split(";")[0]
    while sb.run_slurm(["squeue", "-h", "-r", "-j", array], check=False).stdout.strip():
        time.sleep(0.5)
    wall = time.monotonic() - t0
    states = sb.run_slurm(
        ["sacct", "-X", "-n", "-P", "-j", array, "-o", "State"], check=False
    ).stdout.split()
    times, _ = hook_times(sb, offset)
    return {"array": array, "wall": wall, "states": states, "hooks": times}


def leftovers(sb: Sandbox) -> dict[str, int]:
    """Containers of the user's daemon, job records, drained nodes: all 0 after."""
    from acbslurm.dockerapi.engine import EngineApi

    api = EngineApi(f"unix://{sb.layout.run}/{sb.user}/docker.sock", timeout=30)
    containers = api.call("GET", "/containers/json?all=1") or []
    records = list(sb.layout.records.rglob("[0-9]*.json"))
    drained = sb.run_slurm(["sinfo", "-h", "-N", "-t", "drain,drained,down", "-o", "%N"])
    return {
        "containers": len(containers),
        "records": len(records),
        "drained nodes": len(set(drained.stdout.split())),
    }


def overlaps(sb: Sandbox, since: int) -> int:
    """The report's GPU overlaps (as root: every user's rows); -1 when it failed."""
    res = subprocess.run(
        [sys.executable, "-m", "acbslurm", "report", "--format", "json", "--start", f"@{since}"],
        env={**os.environ, **sb.env()},
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        return int(json.loads(res.stdout)["data_errors"]["gpu_overlaps"])
    except (ValueError, KeyError, TypeError):
        return -1


def daemons_rss_mib(sb: Sandbox) -> float:
    total = 0
    for st in sb.status():
        if st.pid:
            try:
                text = Path(f"/proc/{st.pid}/status").read_text()
            except OSError:
                continue
            rss = [ln.split()[1] for ln in text.splitlines() if ln.startswith("VmRSS:")]
            total += int(rss[0]) if rss else 0
    return total / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/var/lib/acbslurm/scale")
    ap.add_argument("--port-base", type=int, default=17297)
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--tasks", type=int, default=256)
    ap.add_argument("--throttle", type=int, default=16)
    ap.add_argument("--ways", default=",".join(WAYS))
    ap.add_argument("--keep", action="store_true", help="leave the sandbox up")
    args = ap.parse_args()
    ways = [w for w in args.ways.split(",") if w]
    if unknown := [w for w in ways if w not in WAYS]:
        raise SystemExit(f"--ways: unknown {', '.join(unknown)} (known: {', '.join(WAYS)})")
    # As an installed wheel's: user1 cannot write __pycache__ in root's checkout, and
    # compiling every module in every job would be measured instead.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "acbslurm")], check=True)
    sb = up(args)
    since = int(time.time())
    results: dict[tuple[str, int], dict[str, object]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="acbslurm-scale-") as d:
            folder = Path(d)
            os.chmod(folder, 0o777)  # the jobs' output
            uuid_files(sb, folder)
            for throttle in (0, args.throttle):
                for way in ways:
                    sb.wait_idle(timeout=300)
                    r = run_array(sb, way, args.tasks, throttle, folder)
                    results[(way, throttle)] = r
                    states = r["states"]
                    assert isinstance(states, list)
                    bad = len(states) - states.count("COMPLETED")
                    wall = float(r["wall"])  # type: ignore[arg-type]
                    label = "unthrottled" if not throttle else f"%{throttle}"
                    hooks = r["hooks"]
                    assert isinstance(hooks, dict)
                    print(
                        f"{way:9s} {label:12s} {args.tasks} tasks in {wall:6.1f} s: "
                        f"{args.tasks / wall * 60:6.0f} jobs/min; {bad} not COMPLETED; "
                        f"prolog {spread(hooks.get('prolog', []))}, "
                        f"epilog {spread(hooks.get('epilog', []))} (median/p95/max)",
                        flush=True,
                    )
        for throttle in (0, args.throttle):
            base = results.get(("docker", throttle))
            mine = results.get(("acbslurm", throttle))
            if base and mine:
                ratio = float(mine["wall"]) / float(base["wall"])  # type: ignore[arg-type]
                label = "unthrottled" if not throttle else f"%{throttle}"
                print(f"acbslurm/docker wall time, {label}: {ratio:.2f}x (goal at %16: <= 1.10x)")
        sb.wait_idle(timeout=300)
        print("left after:", ", ".join(f"{k} {v}" for k, v in leftovers(sb).items()))
        print(f"report GPU overlaps since the first array: {overlaps(sb, since)}")
        print(f"sandbox daemons' memory: {daemons_rss_mib(sb):.0f} MiB")
        print(
            f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)"
        )
    finally:
        if not args.keep:
            subprocess.run(
                [sys.executable, "-m", "acbslurm", "sandbox", "down", "--dir", args.dir],
                check=False,
                stdout=subprocess.DEVNULL,
            )


if __name__ == "__main__":
    main()
