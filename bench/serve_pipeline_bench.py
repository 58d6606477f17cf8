"""Per-token latency of a model split over two worker processes vs. the same model in one.

    python bench/serve_pipeline_bench.py [--requests 10] [--tokens 64]

The demo's model C (4 blocks of width 192; made once, cached) is served twice by one
pool on 8 unsized CPU stand-ins (so nothing is ever evicted): ``c1`` in one worker
process, ``c2`` with ``procs: 2`` (two pipeline stages over gloo on 127.0.0.1). One
client sends streaming greedy requests, alternating the two models; per request,
per-token latency = (last chunk - first chunk) / (completion tokens - 1). Prints the
median and p90 of each, their ratio, and whether the outputs were identical.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import openai

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from acbslurm.serve.modelmaker import demo_models
from acbslurm.serve.pool import load_pool_text
from acbslurm.serve.runner import PoolServer

PROMPTS = ("What is a GPU?", "The broker lends GPUs", "Retrieval augmented generation")


def one(client: openai.OpenAI, model: str, prompt: str, tokens: int) -> tuple[float, float, str]:
    """(per-token seconds, first-token seconds, text) of one streaming request."""
    t0 = time.perf_counter()
    first = last = 0.0
    text = []
    used = 0
    stream = client.completions.create(
        model=model,
        prompt=prompt,
        max_tokens=tokens,
        stream=True,
        stream_options={"include_usage": True},
    )
    for chunk in stream:
        now = time.perf_counter()
        if chunk.choices and chunk.choices[0].text:
            first = first or now
            last = now
            text.append(chunk.choices[0].text)
        if chunk.usage is not None:
            used = chunk.usage.completion_tokens
    return (last - first) / max(1, used - 1), first - t0, "".join(text)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=10)
    ap.add_argument("--tokens", type=int, default=64)
    args = ap.parse_args()
    path, _ = demo_models()["model-c"]
    models = "".join(
        f"  - {{name: {n}, path: {path}, devices: 8, procs: {p}, temperature: 0}}\n"
        for n, p in (("c1", 1), ("c2", 2))
    )
    text = f"listen: 127.0.0.1:0\ndevices: cpu:8\nmax_queue: 8\nmodels:\n{models}"
    srv = PoolServer(load_pool_text(text, "bench-pool.yaml"))
    srv.start(ready_timeout=300)
    try:
        client = openai.OpenAI(
            base_url=f"http://127.0.0.1:{srv.port}/v1", api_key="x", max_retries=0, timeout=120
        )
        for m in ("c1", "c2"):
            one(client, m, "warm up", 4)
        per: dict[str, list[float]] = {"c1": [], "c2": []}
        firsts: dict[str, list[float]] = {"c1": [], "c2": []}
        same = True
        for i in range(args.requests):
            prompt = PROMPTS[i % len(PROMPTS)]
            outs = {}
            for m in ("c1", "c2") if i % 2 == 0 else ("c2", "c1"):
                tok, first, outs[m] = one(client, m, prompt, args.tokens)
                per[m].append(tok)
                firsts[m].append(first)
            same = same and outs["c1"] == outs["c2"]
    finally:
        srv.stop()
    import os

    print(f"host: {os.cpu_count()} CPUs; model C: 4 blocks, width 192; {args.tokens} tokens")
    for m, label in (("c1", "1 process "), ("c2", "2 processes")):
        s = sorted(per[m])
        print(
            f"{label}: per token p50 {statistics.median(s) * 1e3:6.2f} ms  "
            f"p90 {s[int(0.9 * (len(s) - 1))] * 1e3:6.2f} ms  "
            f"first token p50 {statistics.median(firsts[m]) * 1e3:6.1f} ms"
        )
    ratio = statistics.median(per["c2"]) / statistics.median(per["c1"])
    print(f"per-token latency 2 processes / 1: {ratio:.2f}; outputs identical: {same}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
