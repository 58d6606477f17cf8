"""Acquire+release round trips with N contending clients against a real broker daemon.

Starts `acbslurm broker serve` on a private unix socket, runs N client processes that
each loop `acquire(1)` + `release()` for --seconds, and prints p50/p99 of the round
trip and the total grants per second. Goals (issue 6, 2-core box): p50 <= 0.5 ms,
p99 <= 2 ms, >= 2000 grants/s with 8 clients.

    python bench/broker_latency.py [--clients 8] [--devices cpu:8] [--seconds 5]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def client(address: str, seconds: float, start: float, out: mp.Queue) -> None:  # type: ignore[type-arg]
    from acbslurm.broker.client import BrokerClient

    c = BrokerClient(address)
    while time.time() < start:
        time.sleep(0.001)
    lat = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        c.release(c.acquire(1))
        lat.append(time.perf_counter() - t0)
    c.close()
    out.put(lat)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--devices", default="cpu:8")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--policy", default="fifo")
    args = ap.parse_args()

    sock = Path(tempfile.mkdtemp(prefix="acbb-bench-", dir="/tmp")) / "b.sock"
    address = f"unix:{sock}"
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONWARNINGS="ignore")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "acbslurm",
            "broker",
            "serve",
            "--listen",
            address,
            "--devices",
            args.devices,
            "--policy",
            args.policy,
        ],
        env=env,
        stderr=subprocess.DEVNULL,
    )
    try:
        while not sock.exists():
            time.sleep(0.05)
        out: mp.Queue = mp.Queue()  # type: ignore[type-arg]
        start = time.time() + 1.5  # everyone connected before the clock starts
        procs = [
            mp.Process(target=client, args=(address, args.seconds, start, out))
            for _ in range(args.clients)
        ]
        for p in procs:
            p.start()
        lat = sorted(x for _ in procs for x in out.get())
        for p in procs:
            p.join()
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(10)

    def pct(q: float) -> float:
        return lat[min(len(lat) - 1, int(q * len(lat)))] * 1000

    print(
        f"broker_latency: {args.clients} clients, devices {args.devices}, policy {args.policy}, "
        f"{args.seconds:g}s, {os.cpu_count()} CPUs"
    )
    print(f"  round trips: {len(lat)}")
    print(f"  acquire+release p50: {pct(0.50):.3f} ms  (goal <= 0.5)")
    print(f"  acquire+release p99: {pct(0.99):.3f} ms  (goal <= 2)")
    print(f"  grants/s: {len(lat) / args.seconds:.0f}  (goal >= 2000)")


if __name__ == "__main__":
    main()
