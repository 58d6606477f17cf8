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
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from acbslurm.broker.evict import StorageEvictor  # noqa: E402


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
    ev = StorageEvictor(dev)
    mine = {p.untyped_storage()._cdata for p in model}
    storages = [s for s in ev.live_storages() if s._cdata in mine]
    for _ in range(2):  # second round is the measured one (pinned buffers warm)
        sync(dev)
        t0 = time.perf_counter()
        ev.evict(storages)
        t1 = time.perf_counter()
        if dev.type == "cuda":
            free_after = torch.cuda.mem_get_info(dev)[0]
        ev.restore()
        t2 = time.perf_counter()
    ok = all(torch.equal(p.detach()[:1024], q) for p, q in zip(model, probe, strict=True))
    print(f"(a) eviction of {total / 1e9:.2f} GB in {len(storages)} storages on {dev}:")
    print(f"    evict (device->pinned host): {total / (t1 - t0) / 1e9:.1f} GB/s")
    print(f"    restore (pinned host->device): {total / (t2 - t1) / 1e9:.1f} GB/s")
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
    try:
        while not sock.exists():
            time.sleep(0.05)
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
                    "--",
                    *work,
                ],
                env=env,
                stdout=subprocess.DEVNULL,
            )
            for _ in range(4)
        ]
        codes = [p.wait() for p in procs]
        together = time.perf_counter() - t0
        from acbslurm.cli.broker import fetch_status

        st = fetch_status(f"unix:{sock}")
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(10)
    print(f"(b) four programs x {gb:g} GB weights, 25% compute ({steps} x {compute_ms:g} ms):")
    print(f"    one after another (no agarun): {sequential:.1f} s")
    print(
        f"    together under agarun: {together:.1f} s (exit codes {codes}, "
        f"grants {st['grants']}, evictions {st['evictions']})"
    )
    print(f"    speedup: {sequential / together:.2f}x (goal >= 2x)")


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
