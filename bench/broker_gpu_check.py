"""The broker's GPU check (one script for the H200; `--smoke` runs it tiny on the CPU).

(a) eviction and restore of ~14 GB of parameters through pinned host memory
    (acbslurm.broker.evict.StorageEvictor), GB/s each way, compared with module.to();
(b) four programs, each holding ~40 GB of weights and computing 25% of the time,
    together under agarun on one GPU vs. one after another without agarun.

    python bench/broker_gpu_check.py            # on a GPU node (needs ~141 GB GPU)
    python bench/broker_gpu_check.py --smoke    # CPU, small sizes: checks the script works
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from acbslurm.broker.evict import StorageEvictor, host_memory  # noqa: E402


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def check_eviction(dev: torch.device, gb: float) -> None:
    chunk = 512 * 1024 * 1024
    n = max(1, int(gb * 1024**3) // chunk)
    model = torch.nn.ParameterList(
        [torch.nn.Parameter(torch.randn(chunk // 4, device=dev)) for _ in range(n)]
    )
    total = sum(p.numel() * p.element_size() for p in model)
    probe = [p.detach()[:1024].clone() for p in model]
    # keep_pinned: the second round reuses the pinned blocks, as a program evicted
    # again does while the host has memory to spare (acbslurm/broker/evict.py).
    ev = StorageEvictor(dev, keep_pinned=True)
    mine = {p.untyped_storage()._cdata for p in model}
    storages = [s for s in ev.live_storages() if s._cdata in mine]
    rounds = []
    for _ in range(2):  # first: pinned memory allocated and locked; second: reused
        sync(dev)
        t0 = time.perf_counter()
        ev.evict(storages)
        t1 = time.perf_counter()
        if dev.type == "cuda":
            free_after = torch.cuda.mem_get_info(dev)[0]
        ev.restore()
        t2 = time.perf_counter()
        rounds.append((t1 - t0, t2 - t1))
    ok = all(torch.equal(p.detach()[:1024], q) for p, q in zip(model, probe, strict=True))
    (cold_out, cold_back), (out, back) = rounds
    print(f"(a) eviction of {total / 1e9:.2f} GB in {len(storages)} storages on {dev}:")
    print(f"    evict (device->pinned host): {total / out / 1e9:.1f} GB/s  (goal >= 45)")
    print(f"    restore (pinned host->device): {total / back / 1e9:.1f} GB/s  (goal >= 45)")
    print(
        f"    first round, pinned memory allocated on the way: {total / cold_out / 1e9:.1f}"
        f" GB/s out, {total / cold_back / 1e9:.1f} GB/s back"
    )
    print(f"    restored bit-identically: {ok}")
    if dev.type == "cuda":
        print(f"    device free memory while evicted: {free_after / 1e9:.1f} GB")
        t0 = time.perf_counter()
        model.to("cpu")
        t1 = time.perf_counter()
        model.to(dev)
        sync(dev)
        t2 = time.perf_counter()
        print(
            f"    module.to(cpu): {total / (t1 - t0) / 1e9:.1f} GB/s, "
            f"module.to(cuda): {total / (t2 - t1) / 1e9:.1f} GB/s"
        )


def check_sharing(device: str, gb: float, steps: int, compute_ms: float, smoke: bool) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONWARNINGS="ignore")
    work = [
        sys.executable,
        str(ROOT / "bench" / "broker_workload.py"),
        "--gb",
        str(gb),
        "--steps",
        str(steps),
        "--compute-ms",
        str(compute_ms),
        "--duty",
        "0.25",
        "--device",
        device,
    ]
    t0 = time.perf_counter()
    for _ in range(4):
        subprocess.run(work, env=env, check=True, stdout=subprocess.DEVNULL)
    sequential = time.perf_counter() - t0

    sock = Path(tempfile.mkdtemp(prefix="acbb-gpu-", dir="/tmp")) / "b.sock"
    # Smoke: one CPU stand-in "device" with room for three programs' weights, not four.
    devices = f"cpu:1:{int(gb * 3.5 * 1024**3)}" if smoke else "nvml"
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "acbslurm",
            "broker",
            "serve",
            "--listen",
            f"unix:{sock}",
            "--devices",
            devices,
            "--policy",
            "quantum",
            "--quantum",
            "2",
        ],
        env=env,
        stderr=subprocess.DEVNULL,
    )
    lowest = {"available": host_memory()[1]}
    done = threading.Event()

    def sample_host_memory() -> None:
        while not done.wait(0.2):
            lowest["available"] = min(lowest["available"], host_memory()[1])

    sampler = threading.Thread(target=sample_host_memory, daemon=True)
    stats = [sock.parent / f"stats{i}.json" for i in range(4)]
    try:
        while not sock.exists():
            time.sleep(0.05)
        sampler.start()
        t0 = time.perf_counter()
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "acbslurm.broker.agarun",
                    "--broker",
                    f"unix:{sock}",
                    "--device",
                    "cpu" if smoke else "cuda",
                    "--memory",
                    f"{gb}G",
                    "--idle-ms",
                    "50",
                    "--stats",
                    str(stats[i]),
                    "--",
                    *work,
                ],
                env=env,
                stdout=subprocess.DEVNULL,
            )
            for i in range(4)
        ]
        codes = [p.wait() for p in procs]
        together = time.perf_counter() - t0
        from acbslurm.broker.status import fetch_status

        st = fetch_status(f"unix:{sock}")
    finally:
        done.set()
        server.send_signal(signal.SIGTERM)
        server.wait(10)
    runs = [json.loads(f.read_text()) for f in stats if f.exists()]
    moved_out = sum(r.get("bytes_evicted", 0) for r in runs)
    moved_back = sum(r.get("bytes_restored", 0) for r in runs)
    secs_out = sum(r.get("evict_seconds", 0.0) for r in runs) or float("nan")
    secs_back = sum(r.get("restore_seconds", 0.0) for r in runs) or float("nan")
    total_mem = host_memory()[0]
    print(f"(b) four programs x {gb:g} GB weights, 25% compute ({steps} x {compute_ms:g} ms):")
    print(f"    one after another (no agarun): {sequential:.1f} s")
    print(
        f"    together under agarun: {together:.1f} s (exit codes {codes}, "
        f"grants {st['grants']}, evictions {st['evictions']})"
    )
    print(f"    speedup: {sequential / together:.2f}x (goal >= 2x)")
    print(
        f"    evicted {moved_out / 1e9:.1f} GB at {moved_out / secs_out / 1e9:.1f} GB/s, "
        f"restored {moved_back / 1e9:.1f} GB at {moved_back / secs_back / 1e9:.1f} GB/s; "
        f"pinned host cache given back {sum(r.get('host_cache_emptied', 0) for r in runs)} "
        f"times; host memory available at least {lowest['available'] / 1e9:.1f} of "
        f"{total_mem / 1e9:.1f} GB"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU")
    ap.add_argument("--evict-gb", type=float, default=14.0)
    ap.add_argument("--program-gb", type=float, default=40.0)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--compute-ms", type=float, default=1000)
    ap.add_argument("--only", choices=["a", "b"], help="run one part")
    a = ap.parse_args()
    if a.smoke:
        dev, a.evict_gb, a.program_gb, a.steps, a.compute_ms = (
            torch.device("cpu"),
            0.25,
            0.25,
            4,
            200,
        )
    else:
        if not torch.cuda.is_available():
            sys.exit("no CUDA GPU here: run with --smoke for the CPU check")
        dev = torch.device("cuda", 0)
    if a.only in (None, "a"):
        check_eviction(dev, a.evict_gb)
    if a.only in (None, "b"):
        check_sharing(dev.type, a.program_gb, a.steps, a.compute_ms, a.smoke)


if __name__ == "__main__":
    main()
