"""acbslurm serve: the seed's pool on 8 devices against the same models on 16 dedicated.

    python bench/serve_bench.py [--seconds 20] [--token-delay 0.004]

Both runs use the demo's models (A:4, B:4, C:8 devices; made once, cached) behind the
real gateway and workers, on CPU stand-in devices of 1.5 MiB:

- pool: 8 devices. C's gang needs all 8, so C and A/B take turns and evict each
  other's weights to host memory;
- dedicated: 16 devices, each model keeps its own (the broker never has to evict);
  this stands for "each model alone on its GPUs".

Load (RAG-like): clients each alternate one request (16 tokens, greedy) with a
retrieval/think pause of 0.2-0.6 s; demand is unequal and shifts half-way (A:3 B:2
C:1 clients, then A:1 B:2 C:3). ``--token-delay`` adds simulated device time per
decoding step (the CPU stand-ins compute on the host's cores, which all models
share; the delay is what a GPU's compute would take, without using the CPU).

Prints throughput (requests/s) and its pool/dedicated ratio, p50/p99 latency per
model, and the time from a request for an evicted model to its first token, split
into wait (for the grant), restore (weights back from host memory) and compute.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from acbslurm.serve.modelmaker import demo_models
from acbslurm.serve.pool import load_pool_text
from acbslurm.serve.runner import PoolServer

PHASES = ({"model-a": 3, "model-b": 2, "model-c": 1}, {"model-a": 1, "model-b": 2, "model-c": 3})
PROMPTS = (
    "What is a GPU?",
    "The broker lends GPUs",
    "Retrieval augmented generation",
    "Slurm jobs",
)


def pool_text(devices: int) -> str:
    lines = [f"listen: 127.0.0.1:0\ndevices: cpu:{devices}:1536K\npolicy: quantum\nquantum: 0.5\n"]
    lines.append("max_queue: 256\nrequest_timeout: 120\nmodels:\n")
    for name, (path, count) in demo_models().items():
        lines.append(
            f"  - {{name: {name}, path: {path}, devices: {count}, temperature: 0, "
            "headroom: 256K, max_tokens: 16, max_batch: 8}\n"
        )
    return "".join(lines)


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def run_load(port: int, seconds: float) -> dict[str, list[float]]:
    lat: dict[str, list[float]] = {m: [] for m in PHASES[0]}
    lock = threading.Lock()
    start = time.monotonic()
    half = start + seconds / 2
    end = start + seconds
    url = f"http://127.0.0.1:{port}/v1/completions"

    def client(slot: int) -> None:
        rng = random.Random(slot)
        with httpx.Client(timeout=120) as http:
            while (now := time.monotonic()) < end:
                phase = PHASES[0] if now < half else PHASES[1]
                model = [m for m, n in phase.items() for _ in range(n)][slot % 6]
                t0 = time.monotonic()
                r = http.post(
                    url, json={"model": model, "prompt": rng.choice(PROMPTS), "max_tokens": 16}
                )
                r.raise_for_status()
                with lock:
                    lat[model].append(time.monotonic() - t0)
                time.sleep(rng.uniform(0.2, 0.6))

    threads = [threading.Thread(target=client, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return lat


def evicted_ttft(port: int, tries: int = 5) -> list[dict[str, float]]:
    out = []
    with httpx.Client(timeout=120) as http:
        url = f"http://127.0.0.1:{port}/v1/completions"
        for _ in range(tries):
            # C's turn needs all 8 devices: A's weights go to host memory.
            http.post(
                url, json={"model": "model-c", "prompt": "hi", "max_tokens": 1}
            ).raise_for_status()
            t0 = time.monotonic()
            r = http.post(
                url, json={"model": "model-a", "prompt": "What is a GPU?", "max_tokens": 1}
            )
            total = time.monotonic() - t0
            r.raise_for_status()
            h = r.headers
            out.append(
                {
                    "total": total,
                    "wait": float(h["x-acbslurm-wait-s"]),
                    "restore": float(h["x-acbslurm-restore-s"]),
                    "compute": float(h["x-acbslurm-compute-s"]),
                }
            )
    return out


def one(
    devices: int, seconds: float, delay: float, ttft: bool
) -> tuple[dict[str, list[float]], dict, list]:
    pool = load_pool_text(pool_text(devices), f"<bench cpu:{devices}>")
    srv = PoolServer(pool, env={"ACBSLURM_SERVE_TOKEN_DELAY": str(delay)})
    srv.start(ready_timeout=300)
    try:
        lat = run_load(srv.port, seconds)
        ttfts = evicted_ttft(srv.port) if ttft else []
        assert srv.broker is not None
        snap = srv.broker.snapshot()
    finally:
        srv.stop()
    return lat, snap, ttfts


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--seconds", type=float, default=20.0, help="load duration per configuration")
    p.add_argument(
        "--token-delay", type=float, default=0.004, help="simulated device seconds per step"
    )
    args = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    print(
        f"host: {os.cpu_count()} CPUs; load {args.seconds:g}s per configuration, "
        f"token delay {args.token_delay}"
    )
    results = {}
    for label, devices in (("dedicated (16 devices)", 16), ("pool (8 devices)", 8)):
        lat, snap, ttfts = one(devices, args.seconds, args.token_delay, ttft=devices == 8)
        results[label] = (lat, snap, ttfts)
        n = sum(len(v) for v in lat.values())
        print(
            f"\n{label}: {n} requests, {n / args.seconds:.2f} req/s; "
            f"broker grants {snap['grants']}, "
            f"evictions {snap['evictions']}, yields asked {snap['yields_asked']}"
        )
        for m, v in lat.items():
            print(
                f"  {m}: {len(v):4d} requests  p50 {percentile(v, 0.5) * 1e3:7.1f} ms  "
                f"p99 {percentile(v, 0.99) * 1e3:7.1f} ms"
            )
    (dl, _, _), (pl, _, ttfts) = results["dedicated (16 devices)"], results["pool (8 devices)"]
    ratio = sum(map(len, pl.values())) / max(1, sum(map(len, dl.values())))
    print(f"\nthroughput pool / dedicated: {ratio:.2f}")
    for m in pl:
        print(
            f"  {m}: p99 pool / dedicated {percentile(pl[m], 0.99) / percentile(dl[m], 0.99):.2f}"
        )
    if ttfts:
        med = {k: statistics.median(t[k] for t in ttfts) for k in ttfts[0]}
        print(
            f"\nfirst token of evicted model-a (median of {len(ttfts)}): "
            f"total {med['total'] * 1e3:.1f} ms = "
            f"wait {med['wait'] * 1e3:.1f} ms + restore {med['restore'] * 1e3:.2f} ms + "
            f"compute {med['compute'] * 1e3:.1f} ms (+ gateway/HTTP)"
        )


if __name__ == "__main__":
    main()
