"""Acquire+release round trips with N contending clients against a real broker daemon.

Starts `acbslurm broker serve` on a private unix socket and runs two measurements with
N client processes (each one `BrokerClient`, looping `acquire(1)` + `release()`):

- open loop (how latency goals are normally stated): the N clients together offer a
  fixed rate (--rate grants/s in total, each client on its own evenly spaced schedule,
  staggered against the others). Latency is measured from the *scheduled* send time,
  so a client that falls behind its schedule counts the delay (no coordinated omission).
- closed loop (maximum throughput): every client sends its next request as soon as the
  previous round trip ends; prints grants/s and the latency under that saturation.

Both are run for each transport: the local lane (what a client on the broker's host
uses by default: requests and grants as unix datagrams, docs/broker.md) and gRPC alone
(what remote clients, and clients with ACBSLURM_BROKER_LANE=0, use).

Goals (2-core box, 8 clients): p50 <= 0.5 ms, p99 <= 2 ms, >= 2000 grants/s.

    python bench/broker_latency.py [--clients 8] [--rate 2000] [--devices cpu:8]
                                   [--seconds 5] [--mode both|open|closed]
                                   [--transport both|lane|grpc] [--no-tuning]
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


def client(
    address: str,
    seconds: float,
    start: float,
    interval: float,
    offset: float,
    tuning: bool,
    lane: bool,
    out: mp.Queue,  # type: ignore[type-arg]
) -> None:
    """One client; ``interval`` 0 = closed loop, else send every ``interval`` s."""
    if tuning:
        from acbslurm.broker.grpc_tuning import CLIENT_EXPERIMENTS, inline_io

        inline_io(CLIENT_EXPERIMENTS)  # what agarun does; must precede `import grpc`
    from acbslurm.broker.client import BrokerClient

    c = BrokerClient(address, lane=lane)
    if c.on_lane != lane:
        raise SystemExit(f"client lane {c.on_lane}, wanted {lane}")
    # `start` is wall-clock time shared by all processes; run on the monotonic clock.
    t_start = time.perf_counter() + (start - time.time())
    while time.perf_counter() < t_start:
        time.sleep(0.001)
    lat = []
    end = t_start + seconds
    if interval == 0:
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            c.release(c.acquire(1))
            lat.append(time.perf_counter() - t0)
    else:
        k = 0
        while True:
            due = t_start + offset + k * interval
            if due >= end:
                break
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            c.release(c.acquire(1))
            lat.append(time.perf_counter() - due)  # from the scheduled send time
            k += 1
    c.close()
    out.put(lat)


def run_phase(
    address: str, clients: int, seconds: float, rate: float, tuning: bool, lane: bool
) -> tuple[list[float], float]:
    """Run ``clients`` processes; ``rate`` 0 = closed loop. Returns sorted latencies, wall s."""
    out: mp.Queue = mp.Queue()  # type: ignore[type-arg]
    start = time.time() + 1.5  # everyone connected before the clock starts
    interval = clients / rate if rate else 0.0
    procs = [
        mp.Process(
            target=client,
            args=(address, seconds, start, interval, i * interval / clients, tuning, lane, out),
        )
        for i in range(clients)
    ]
    for p in procs:
        p.start()
    lat = sorted(x for _ in procs for x in out.get())
    for p in procs:
        p.join()
    return lat, seconds


def pct(lat: list[float], q: float) -> float:
    return lat[min(len(lat) - 1, int(q * len(lat)))] * 1000 if lat else float("nan")


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--rate", type=float, default=2000.0, help="open loop: total grants/s")
    ap.add_argument("--devices", default="cpu:8")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--policy", default="fifo")
    ap.add_argument("--mode", choices=["both", "open", "closed"], default="both")
    ap.add_argument("--transport", choices=["both", "lane", "grpc"], default="both")
    ap.add_argument(
        "--no-tuning",
        action="store_true",
        help="clients keep gRPC's default I/O threads (see acbslurm/broker/grpc_tuning.py)",
    )
    args = ap.parse_args()
    tuning = not args.no_tuning

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
    transports = ["lane", "grpc"] if args.transport == "both" else [args.transport]
    results: dict[tuple[str, str], tuple[list[float], float]] = {}
    try:
        while not Path(f"{sock}.lane").exists():  # the lane opens right after gRPC
            time.sleep(0.05)
        for t in transports:
            lane = t == "lane"
            if args.mode in ("both", "open"):
                results[t, "open"] = run_phase(
                    address, args.clients, args.seconds, args.rate, tuning, lane
                )
            if args.mode in ("both", "closed"):
                results[t, "closed"] = run_phase(
                    address, args.clients, args.seconds, 0.0, tuning, lane
                )
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(10)

    print(
        f"broker_latency: {args.clients} client processes, devices {args.devices}, "
        f"policy {args.policy}, {args.seconds:g}s per run, {os.cpu_count()} CPUs, "
        f"client gRPC tuning {'on' if tuning else 'off'}"
    )
    for t in transports:
        label = "local lane (default on the broker's host)" if t == "lane" else "gRPC only"
        print(f" transport: {label}")
        if (t, "open") in results:
            lat, secs = results[t, "open"]
            p50, p99 = pct(lat, 0.50), pct(lat, 0.99)
            print(f"  open loop, offered {args.rate:g} grants/s (latency from scheduled send):")
            print(f"    achieved grants/s: {len(lat) / secs:.0f}")
            print(f"    acquire+release p50: {p50:.3f} ms  (goal <= 0.5: {verdict(p50 <= 0.5)})")
            print(f"    acquire+release p99: {p99:.3f} ms  (goal <= 2: {verdict(p99 <= 2)})")
            print(f"    acquire+release max: {lat[-1] * 1000:.3f} ms" if lat else "    no samples")
        if (t, "closed") in results:
            lat, secs = results[t, "closed"]
            gps = len(lat) / secs
            print("  closed loop, saturating (maximum throughput):")
            print(f"    grants/s: {gps:.0f}  (goal >= 2000: {verdict(gps >= 2000)})")
            print(f"    acquire+release p50 at saturation: {pct(lat, 0.50):.3f} ms")
            print(f"    acquire+release p99 at saturation: {pct(lat, 0.99):.3f} ms")


if __name__ == "__main__":
    main()
