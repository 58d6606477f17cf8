"""The serving pool's GPU check (issue 14): four ~35 GB models on one GPU, an evicted
model's restore and first token, against a cold start measured in the same run; then
the same through the real gateway and worker processes.

    python bench/serve_gpu_check.py            # on the H200 (~140 GB GPU, ~35 GB disk)
    python bench/serve_gpu_check.py --smoke    # CPU, tiny models: checks the script works

Each phase runs in a process of its own (the GPU and pinned host memory of one are
given back before the next):

1. **residency** (``--gb``, default 35): one random GPT-2 of that size is written to
   disk (bf16 safetensors shards made on the GPU, a trained tokenizer; the disk holds
   one, so the four models are four copies of it in GPU memory, and their outputs can
   be compared). **Cold start**: a new process loads it from disk onto the GPU and
   computes the first token of a prompt (page cache dropped first where the kernel
   allows it); time from the process's start to that token. Then the four copies, at
   most ``--resident`` (3) on the device, the others evicted to pinned host memory in
   place by the serving layer's own ``Residency`` (acbslurm/serve/engines/builtin/residency.py, the
   broker's ``StorageEvictor``). Each round a request comes for the evicted model:
   the least recently used one is evicted to make room, the requested one restored,
   its first token computed: evict, restore (GB/s), compute, and the time from the
   request to the first token, when the room was already free (the request arrives
   after the eviction) and with the eviction on its path.
2. **gateway** (``--gateway-gb``, default 16): four models (one folder) behind
   ``acbslurm serve``'s gateway, one worker process each, the pool's own broker on
   the GPU (NVML), headroom sized so that at most three stay resident; requests round
   robin over HTTP, each for the evicted model; the gateway's timing headers split
   each first token into wait (another model's eviction included), restore, compute.
   Smaller models: every worker reads its weights into host memory at start (a full
   copy until its first grant, docs/serve.md), and four 35 GB copies would not fit
   the machine's 128 GiB. Needs starlette and uvicorn (scripts/device_wheels.sh).

Goals (exit 1 when one is missed): restore >= 45 GB/s (median), first token <= 1.5 s
after the request (residency: worst round with the room free; gateway: worst request,
eviction included), faster than the cold start; and always: identical first tokens
(before eviction, after each restore, cold; the four gateway models alike) and every
gateway request answered. With ``--smoke`` the speed goals are printed but not checked
unless given explicitly (``--goal-gbps``, ``--goal-first-s``; residency phase).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GOAL_GBPS = 45.0
GOAL_FIRST_S = 1.5
WIDTH = 8192  # GPT-2 width of the GPU-sized model (64 heads of 128)


def _env() -> dict[str, str]:
    """The environment of the phases' processes: this checkout first on the path."""
    extra = os.environ.get("PYTHONPATH", "")
    return dict(os.environ, PYTHONPATH=str(ROOT) + (os.pathsep + extra if extra else ""))


def shape_for(gb: float, smoke: bool) -> dict[str, int]:
    """GPT-2 dimensions whose bf16 weights take about ``gb`` GB."""
    if smoke:
        return {"n_embd": 64, "n_layer": 2, "n_head": 2, "n_positions": 256}
    per_layer = 12 * WIDTH * WIDTH + 13 * WIDTH
    layers = max(1, round(gb * 1e9 / 2 / per_layer))
    return {"n_embd": WIDTH, "n_layer": layers, "n_head": 64, "n_positions": 1024}


def write_model(dest: Path, gb: float, device: str, smoke: bool, shard_gb: float = 4.0) -> int:
    """A random GPT-2 in safetensors shards (made on ``device``, written shard by shard
    so host memory holds one shard at a time); returns the bytes of its weights."""
    import torch
    from safetensors.torch import save_file
    from transformers import GPT2Config, GPT2LMHeadModel

    from acbslurm.serve.modelmaker import make_tokenizer

    tok = make_tokenizer(400)
    config = GPT2Config(vocab_size=len(tok), bos_token_id=0, eos_token_id=0, pad_token_id=1)
    for key, value in shape_for(gb, smoke).items():
        setattr(config, key, value)
    with torch.device("meta"):
        names = [(n, p.shape) for n, p in GPT2LMHeadModel(config).named_parameters()]
    dest.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator(device=device).manual_seed(0)
    weight_map: dict[str, str] = {}
    shard: dict[str, Any] = {}
    total = 0

    def flush() -> None:
        if shard:
            name = f"part-{len(set(weight_map.values())) + 1:05d}.safetensors"
            save_file(shard, str(dest / name))
            weight_map.update(dict.fromkeys(shard, name))
            shard.clear()  # host memory holds one shard at a time

    for name, shape in names:
        t = torch.randn(shape, generator=gen, device=device, dtype=torch.bfloat16) * 0.02
        shard[name] = t.cpu().contiguous()
        total += t.numel() * 2
        if sum(v.numel() * 2 for v in shard.values()) >= shard_gb * 1e9:
            flush()
    flush()
    # Index file names: what from_pretrained expects of a sharded checkpoint.
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (dest / "model.safetensors.index.json").write_text(json.dumps(index))
    config.save_pretrained(dest)
    tok.save_pretrained(dest)  # type: ignore[attr-defined]
    if device != "cpu":
        torch.cuda.empty_cache()  # the pool's models need the room, not this cache
    return total


def drop_page_cache(folder: Path) -> str:
    """Try to make the next read come from disk; say what happened."""
    with contextlib.suppress(OSError):
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("1\n")
        return "page cache dropped"
    advised = 0
    for f in folder.glob("*.safetensors"):
        with contextlib.suppress(OSError, AttributeError):
            fd = os.open(f, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                advised += 1
            finally:
                os.close(fd)
    return f"drop_caches refused; fadvise(DONTNEED) on {advised} files (cache may remain)"


def load(path: Path, device: str) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    kw: dict[str, Any] = {"dtype": torch.bfloat16}
    if device != "cpu":
        kw["device_map"] = device  # straight from the files onto the GPU
    model = AutoModelForCausalLM.from_pretrained(str(path), **kw)
    return model.eval()


def prompt_ids(path: Path, tokens: int, device: str) -> Any:
    import torch
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path))
    ids = tok("What is a GPU? A graphics processing unit computes many things at once. " * 40)
    return torch.tensor([ids["input_ids"][:tokens]], device=device)


def first_token(model: Any, ids: Any) -> int:
    import torch

    with torch.inference_mode():
        return int(model(ids).logits[0, -1].argmax().item())  # .item() waits for the GPU


def cold_child(path: Path, device: str, tokens: int) -> None:
    """The cold start: this process (new) loads from disk and computes the first token."""
    model = load(path, device)
    ids = prompt_ids(path, tokens, device)
    tok = first_token(model, ids)
    print(json.dumps({"token": tok, "wall": time.time()}), flush=True)


def cold_start(path: Path, device: str, tokens: int) -> tuple[float, int]:
    env = dict(_env(), PYTHONWARNINGS="ignore")
    argv = [sys.executable, __file__, "--cold-child", str(path), "--device", device]
    start = time.time()
    res = subprocess.run(
        [*argv, "--prompt-tokens", str(tokens)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if res.returncode != 0:
        raise SystemExit(f"cold start failed ({res.returncode}):\n{res.stderr[-3000:]}")
    out = json.loads(res.stdout.strip().splitlines()[-1])
    return out["wall"] - start, int(out["token"])


class Pool:
    """Four models, at most ``resident`` on the device, least recently used evicted."""

    def __init__(self, models: list[Any], device: str, resident: int) -> None:
        from acbslurm.serve.engines.builtin.residency import Residency

        kind = "cpu" if device == "cpu" else "cuda"
        self.res = [Residency(m, kind) for m in models]
        import torch

        index = torch.device(device).index or 0
        for r in self.res:
            # Loaded onto the device already: this only sets up its evictor (no copy).
            r.ensure_on_device(index)
        self.used = list(range(len(models)))  # least recently used first
        self.resident = resident

    def start(self) -> None:
        """The pool's start: only ``resident`` models stay on the device."""
        while len(self.on_device()) > self.resident:
            victim = next(i for i in self.used if self.res[i].resident)
            self.res[victim].evict()

    def on_device(self) -> list[int]:
        return [i for i, r in enumerate(self.res) if r.resident]

    def make_room(self, want: int) -> float:
        """Evict the least recently used models until ``want`` fits; seconds it took."""
        spent = 0.0
        while len([i for i in self.on_device() if i != want]) >= self.resident:
            victim = next(i for i in self.used if i != want and self.res[i].resident)
            spent += self.res[victim].evict()
        return spent

    def touch(self, i: int) -> None:
        self.used.remove(i)
        self.used.append(i)


def sync(device: str) -> None:
    if device != "cpu":
        import torch

        torch.cuda.synchronize()


def serve_rounds(pool: Pool, models: list[Any], ids: Any, rounds: int, device: str) -> list[dict]:
    out = []
    for _ in range(rounds):
        want = next(i for i in pool.used if not pool.res[i].resident)
        sync(device)
        asked = time.perf_counter()  # the request, room not yet free
        evict_s = pool.make_room(want)
        room = time.perf_counter()  # the request, had it come once the room was free
        with pool.res[want].lock:
            restore_s = pool.res[want].ensure_on_device()
        sync(device)
        restored = time.perf_counter()
        tok = first_token(models[want], ids)
        done = time.perf_counter()
        pool.touch(want)
        out.append(
            {
                "model": want,
                "token": tok,
                "evict_s": evict_s,
                "restore_s": restore_s,
                "restore_gbps": pool.res[want].weights / (restored - room) / 1e9,
                "compute_s": done - restored,
                "first_room_free_s": done - room,
                "first_with_evict_s": done - asked,
            }
        )
    return out


def report(rows: list[dict], weights: int, cold_s: float, args: argparse.Namespace) -> int:
    for r in rows:
        print(
            f"    model {r['model']}: evict other {r['evict_s']:.3f} s, restore "
            f"{r['restore_s']:.3f} s ({r['restore_gbps']:.2f} GB/s), compute "
            f"{r['compute_s'] * 1e3:.1f} ms; first token {r['first_room_free_s']:.3f} s after "
            f"the request (room free), {r['first_with_evict_s']:.3f} s with the eviction"
        )
    gbps = statistics.median(r["restore_gbps"] for r in rows)
    worst = max(r["first_room_free_s"] for r in rows)
    worst_evict = max(r["first_with_evict_s"] for r in rows)
    goal_gbps = args.goal_gbps if args.goal_gbps is not None else GOAL_GBPS
    goal_first = args.goal_first_s if args.goal_first_s is not None else GOAL_FIRST_S
    check_speed = not args.smoke or args.goal_gbps is not None or args.goal_first_s is not None
    missed = []
    if check_speed and gbps < goal_gbps:
        missed.append(f"restore {gbps:.2f} GB/s < {goal_gbps:g}")
    if check_speed and worst > goal_first:
        missed.append(f"first token {worst:.3f} s > {goal_first:g} s")
    if worst >= cold_s:
        missed.append(f"first token after restore {worst:.3f} s is not faster than cold start")
    note = "" if check_speed else "  (not checked: --smoke)"
    print(
        f"restore, median: {gbps:.2f} GB/s of {weights / 1e9:.2f} GB  (goal >= {goal_gbps:g}){note}"
    )
    print(f"first token of an evicted model, worst: {worst:.3f} s (goal <= {goal_first:g}){note}")
    print(f"    with the eviction of another model on its path: {worst_evict:.3f} s (no goal)")
    print(
        f"cold start (new process, weights from disk): {cold_s:.2f} s  "
        f"= {cold_s / worst:.1f}x the evicted model's first token"
    )
    for m in missed:
        print(f"MISSED: {m}")
    return 1 if missed else 0


PROMPT = "What is a GPU? A graphics processing unit computes many things at once. " * 2


def gateway_pool_yaml(path: Path, weights: int, memory: int, models: int, smoke: bool) -> str:
    """Four models (the same folder) whose headroom lets at most three stay resident.

    A turn asks the broker for headroom + weights; with ``headroom = memory - 3.5 x
    weights`` three resident models leave too little, two leave enough, so every
    request for an evicted model evicts the least recently used other one.
    """
    headroom = max(memory - int(3.5 * weights), 64 << 20 if not smoke else 0)
    devices = f"cpu:1:{memory}" if smoke else "auto"
    lines = [
        "listen: 127.0.0.1:0",
        f"devices: {devices}",
        "policy: fifo",
        "max_queue: 8",
        "request_timeout: 300",
        "models:",
    ]
    for i in range(models):
        lines.append(
            f"  - {{name: m{i}, path: {path}, devices: 1, dtype: bfloat16, max_batch: 1, "
            f"max_tokens: 1, temperature: 0, headroom: {headroom}}}"
        )
    return "\n".join(lines) + "\n"


def gateway_requests(url: str, models: int, count: int) -> list[dict[str, Any]]:
    """Requests round robin (each for the least recently used, i.e. evicted, model)."""
    import httpx

    rows = []
    with httpx.Client(timeout=300) as client:
        for i in range(count):
            body = {"model": f"m{i % models}", "prompt": PROMPT, "max_tokens": 1}
            t0 = time.perf_counter()
            r = client.post(f"{url}/completions", json={**body, "temperature": 0})
            took = time.perf_counter() - t0
            h = r.headers
            rows.append(
                {
                    "model": body["model"],
                    "status": r.status_code,
                    "text": r.json()["choices"][0]["text"] if r.status_code == 200 else r.text,
                    "first_s": took,
                    "wait_s": float(h.get("x-acbslurm-wait-s", "nan")),
                    "restore_s": float(h.get("x-acbslurm-restore-s", "nan")),
                    "compute_s": float(h.get("x-acbslurm-compute-s", "nan")),
                }
            )
    return rows


def gateway_report(rows: list[dict[str, Any]], weights: int, models: int, check: bool) -> int:
    missed = [
        f"{r['model']}: HTTP {r['status']}: {r['text'][:200]}" for r in rows if r["status"] != 200
    ]
    for r in rows:
        print(
            f"    {r['model']}: first token {r['first_s']:.3f} s after the request = wait "
            f"{r['wait_s']:.3f} (incl. another model's eviction) + restore {r['restore_s']:.3f} "
            f"+ compute {r['compute_s']:.3f} s (+ HTTP)"
        )
    later = [r for r in rows[models:] if r["status"] == 200]
    restored = [r for r in later if r["restore_s"] > 0]
    if len(restored) < len(later) or not later:
        missed.append(f"{len(restored)} of {len(later)} requests after the first round restored")
    if restored:
        gbps = statistics.median(weights / r["restore_s"] / 1e9 for r in restored)
        worst = max(r["first_s"] for r in restored)
        note = "" if check else "  (not checked: --smoke)"
        print(f"gateway: restore, median {gbps:.2f} GB/s (goal >= {GOAL_GBPS:g}){note}")
        print(
            f"gateway: first token of an evicted model, worst {worst:.3f} s "
            f"(goal <= {GOAL_FIRST_S:g}; another model's eviction included){note}"
        )
        if check and gbps < GOAL_GBPS:
            missed.append(f"gateway restore {gbps:.2f} GB/s < {GOAL_GBPS:g}")
        if check and worst > GOAL_FIRST_S:
            missed.append(f"gateway first token {worst:.3f} s > {GOAL_FIRST_S:g} s")
    texts = {r["text"] for r in rows if r["status"] == 200}
    if len(texts) > 1:
        missed.append(f"the four copies answered differently: {sorted(texts)[:4]}")
    for m in missed:
        print(f"MISSED: {m}")
    return 1 if missed else 0


def gateway_phase(args: argparse.Namespace, device: str) -> int:
    """The same pool behind the real gateway: worker processes, the broker, HTTP."""
    from acbslurm.serve.pool import load_pool_text
    from acbslurm.serve.runner import PoolServer

    work = Path(tempfile.mkdtemp(prefix="acbslurm-serve-gw-"))
    try:
        weights = write_model(work / "model", args.gateway_gb, device, args.smoke)
        memory = 4 * weights if args.smoke else _gpu_memory()
        text = gateway_pool_yaml(work / "model", weights, memory, args.models, args.smoke)
        print(
            f"== gateway: {args.models} workers of {weights / 1e9:.2f} GB on {device}, "
            f"at most 3 resident; pool:\n{text}",
            end="",
        )
        server = PoolServer(load_pool_text(text, "<serve_gpu_check pool>", base=work))
        t0 = time.perf_counter()
        server.start(ready_timeout=args.ready_timeout)
        try:
            states = {n: (h.state, h.reason) for n, h in server.gateway.handles.items()}
            print(f"gateway: workers {states} after {time.perf_counter() - t0:.1f} s")
            if any(s != "ready" for s, _ in states.values()):
                print("MISSED: not every worker started")
                return 1
            url = f"http://127.0.0.1:{server.port}/v1"
            rows = gateway_requests(url, args.models, args.models + args.rounds)
        finally:
            server.stop()
        return gateway_report(rows, weights, args.models, not args.smoke)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _gpu_memory() -> int:
    """The GPU's memory as the pool's broker sees it (NVML), without a CUDA context here."""
    from acbslurm.broker.devices import resolve_devices

    return min(d.memory_total for d in resolve_devices("auto", {}).devices)


def run_gateway_phase(args: argparse.Namespace) -> int:
    """In a new process: the first phase's pinned host memory is given back first."""
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        print(f"MISSED: gateway not run: {exc} (scripts/device_wheels.sh carries it)")
        return 1
    argv = [sys.executable, __file__, "--gateway-phase", "--models", str(args.models)]
    argv += ["--rounds", str(args.rounds), "--gateway-gb", str(args.gateway_gb)]
    argv += ["--device", args.device] if args.device else []
    argv += ["--smoke"] if args.smoke else []
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *sys.path[1:]]))
    try:
        return subprocess.run(
            argv, env=env, timeout=args.ready_timeout + 300, check=False
        ).returncode
    except subprocess.TimeoutExpired:
        print("MISSED: the gateway phase did not end in time")
        return 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help="CPU, a tiny model")
    p.add_argument("--gb", type=float, default=35.0, help="size of each model (bf16 GB)")
    p.add_argument("--models", type=int, default=4)
    p.add_argument("--resident", type=int, default=3, help="models on the device at once")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--device", default="")
    p.add_argument("--dir", default="", help="where the weights go (default: a temp dir)")
    p.add_argument("--goal-gbps", type=float, default=None)
    p.add_argument("--goal-first-s", type=float, default=None)
    p.add_argument("--gateway-gb", type=float, default=16.0, help="model size behind the gateway")
    p.add_argument("--no-gateway", action="store_true", help="skip the gateway phase")
    p.add_argument("--ready-timeout", type=float, default=600.0)
    p.add_argument("--cold-child", default="", help=argparse.SUPPRESS)
    p.add_argument("--gateway-phase", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--residency-phase", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    device = args.device or ("cpu" if args.smoke else "cuda:0")
    if args.cold_child:
        cold_child(Path(args.cold_child), device, args.prompt_tokens)
        return 0
    if args.gateway_phase:
        return gateway_phase(args, device)
    import torch

    if device != "cpu" and not torch.cuda.is_available():
        print("no CUDA device here: run with --smoke for the CPU check", file=sys.stderr)
        return 3
    if args.resident >= args.models:
        p.error("--resident must be less than --models (else nothing is ever evicted)")
    if args.residency_phase:
        return residency_phase(args, device)
    # Each phase in a process of its own: the GPU and the pinned host memory of one
    # (three 35 GB models resident, two evicted) are given back before the next.
    rc = _phase(argv if argv is not None else sys.argv[1:], "--residency-phase", args)
    if not args.no_gateway:
        rc = max(rc, run_gateway_phase(args))
    print(f"serve_gpu_check: {'all goals met' if rc == 0 else 'a goal was missed'}")
    return rc


def _phase(argv: list[str], flag: str, args: argparse.Namespace) -> int:
    try:
        run = subprocess.run(
            [sys.executable, __file__, *argv, flag],
            env=_env(),
            timeout=args.ready_timeout + 600,
            check=False,
        )
    except subprocess.TimeoutExpired:
        print(f"MISSED: {flag} did not end in time")
        return 1
    return run.returncode


def residency_phase(args: argparse.Namespace, device: str) -> int:
    """Four models in this process, through the serving layer's Residency."""
    work = Path(args.dir or tempfile.mkdtemp(prefix="acbslurm-serve-gpu-"))
    path = work / "model"
    try:
        t0 = time.perf_counter()
        weights = write_model(path, args.gb, device, args.smoke)
        print(
            f"== one model of {weights / 1e9:.2f} GB written in {time.perf_counter() - t0:.1f} s"
            f" ({path}); {args.models} copies, at most {args.resident} on {device}"
        )
        # (not for --smoke: dropping the page cache slows everything else on the host)
        print(f"cold start: {'page cache kept (--smoke)' if args.smoke else drop_page_cache(path)}")
        cold_s, cold_tok = cold_start(path, device, args.prompt_tokens)
        t0 = time.perf_counter()
        first = load(path, device)
        print(f"pool: first model loaded in {time.perf_counter() - t0:.1f} s")
        models = [first] + [copy.deepcopy(first) for _ in range(args.models - 1)]
        ids = prompt_ids(path, args.prompt_tokens, device)
        before = [first_token(m, ids) for m in models]
        pool = Pool(models, device, args.resident)
        pool.start()
        print(
            f"pool: {len(pool.on_device())} resident, "
            f"{args.models - len(pool.on_device())} evicted to host memory"
        )
        rows = serve_rounds(pool, models, ids, args.rounds, device)
        rc = report(rows, weights, cold_s, args)
        wrong = [r for r in rows if r["token"] != before[r["model"]] or r["token"] != cold_tok]
        if wrong or len(set(before)) != 1:
            print(
                f"MISSED: first tokens differ: before {before}, cold {cold_tok}, "
                f"restored {[r['token'] for r in rows]}"
            )
            rc = 1
        else:
            print(f"first tokens identical: before eviction, restored and cold ({cold_tok})")
        return rc
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
