#!/usr/bin/env python3
"""Kill the demo pool's vLLM servers again and again: every model must come back each
time, and nothing of a killed server may be left (issue 41's "done when").

The demo pool (``acbslurm serve --demo --engine vllm``: A:4, B:4, C:8 on 8 CPU
stand-ins) runs in this process. Each model in turn has its server killed three times
in a row, mid-stream, until ``--kills`` kills are done; the kills rotate over what is
killed: the API server (SIGKILL), its engine process (``VLLM::EngineCore``, SIGKILL),
the model's worker (SIGKILL). After each kill the bench checks:

- the stream that was cut ends with an error event and no ``data: [DONE]``;
- once the worker is restarted, no process of the killed server is left (its session,
  and below it), none of its ``/dev/shm`` files (``psm_*``, ``sem.mp-*``), not its
  ``$TMPDIR/acbslurm-vllm-*`` folder;
- the model is ready again (``/health`` 200, every model ready) and answers.

It prints one line per kill and a summary (seconds from the kill to nothing left and to
ready again); exit 1 when any check failed. Too slow for CI (a vLLM start is about a
minute here); the CI test (tests/unit/serve/test_serve_vllm.py) does three kills.

    .venv/bin/python bench/vllm_kill_bench.py [--kills 30] [--per-model 3]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from acbslurm.serve import procs
from acbslurm.serve.engines.vllm.server import default_python
from acbslurm.serve.modelmaker import demo_pool_yaml
from acbslurm.serve.pool import load_pool_text
from acbslurm.serve.runner import PoolServer

WHAT = ("api-server", "engine", "worker")


def env(tmp: Path) -> dict[str, str]:
    """Small and quiet on a shared machine, as the vLLM tests run it."""
    return {
        "OMP_NUM_THREADS": "1",
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CPU_CI_ENV": "1",
        "VLLM_CACHE_ROOT": str(tmp / "vllm-cache"),
        "VLLM_NO_USAGE_STATS": "1",
        "HF_HUB_OFFLINE": "1",
    }


def wait_for(what: Any, timeout: float, why: str) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout:g} s: {why}")
        time.sleep(0.05)


def engine_of(server: int) -> int:
    for pid in procs.descendants({server}):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"VLLM::EngineCore"):
                return pid
    return 0


def stream(port: int, model: str, lines: list[str]) -> threading.Thread:
    def read() -> None:
        body = {
            "model": model,
            "prompt": "Hi",
            "max_tokens": 400,
            "n": 64,
            "temperature": 1.0,
            "stream": True,
            "ignore_eos": True,
        }
        with (
            contextlib.suppress(httpx.HTTPError),
            httpx.stream(
                "POST", f"http://127.0.0.1:{port}/v1/completions", json=body, timeout=300
            ) as r,
        ):
            lines.append(f"status {r.status_code}")
            for line in r.iter_lines():
                if line.startswith("data:"):
                    lines.append(line)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    return t


def healthy(port: int) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
    return False


def one_kill(srv: PoolServer, model: str, what: str) -> dict[str, Any]:
    h = srv.gateway.handles[model]
    sid, folder = h.server_pid, h.server_folder
    tree = procs.server_pids(sid)
    shm = procs.shm_files(tree)
    restarts, lines = h.restarts, list[str]()
    reader = stream(srv.port, model, lines)
    wait_for(lambda: len(lines) > 2, 120, f"{model}'s stream began")
    assert h.proc is not None
    target = {"api-server": sid, "engine": engine_of(sid), "worker": h.proc.pid}[what]
    t0 = time.monotonic()
    os.kill(target, signal.SIGKILL)
    reader.join(120)
    problems = []
    if any(line == "data: [DONE]" for line in lines) or '"error"' not in lines[-1]:
        problems.append(f"the cut stream ended {lines[-1][:120]!r}")
    wait_for(lambda: h.restarts > restarts, 120, f"{model}'s worker restarted")
    gone = time.monotonic() - t0
    left = procs.server_pids(sid)
    if left:
        problems.append(f"processes left: {sorted(left)}")
    kept = sorted(f for f in shm if os.path.exists(f))
    if kept:
        problems.append(f"/dev/shm files left: {kept}")
    if folder and os.path.exists(folder):
        problems.append(f"folder left: {folder}")
    wait_for(lambda: h.state == "ready" and healthy(srv.port), 600, f"{model} ready again")
    back = time.monotonic() - t0
    r = httpx.post(
        f"http://127.0.0.1:{srv.port}/v1/completions",
        json={"model": model, "prompt": "back?", "max_tokens": 3},
        timeout=120,
    )
    if r.status_code != 200:
        problems.append(f"answer after the restart: {r.status_code} {r.text[:200]}")
    return {
        "model": model,
        "killed": what,
        "server": sid,
        "processes": len(tree),
        "shm": len(shm),
        "cleaned_s": round(gone, 2),
        "ready_s": round(back, 2),
        "problems": problems,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--kills", type=int, default=30, help="kills in all")
    p.add_argument("--per-model", type=int, default=3, help="kills of a model in a row")
    p.add_argument("--json", default="", help="write the results there too")
    args = p.parse_args(argv)
    if not Path(default_python()).is_file():
        print(f"no vLLM environment at {default_python()}", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="vllm-kill-bench-"))
    text = demo_pool_yaml(root=tmp / "models", listen="127.0.0.1:0", engine="vllm")
    srv = PoolServer(load_pool_text(text, "<demo pool>"), env=env(tmp))
    t0 = time.monotonic()
    srv.start(ready_timeout=900)
    print(f"pool ready in {time.monotonic() - t0:.0f} s", flush=True)
    models = list(srv.gateway.handles)
    results = []
    try:
        for k in range(args.kills):
            model = models[(k // args.per_model) % len(models)]
            what = WHAT[k % len(WHAT)]
            load = os.getloadavg()[0]
            r = one_kill(srv, model, what)
            r["load"] = round(load, 1)
            results.append(r)
            print(json.dumps(r), flush=True)
    finally:
        srv.stop()
    bad = [r for r in results if r["problems"]]
    cleaned = [r["cleaned_s"] for r in results]
    ready = [r["ready_s"] for r in results]
    print(
        f"{len(results)} kills, {len(bad)} with problems; nothing left "
        f"{statistics.median(cleaned):.1f} s after the kill (median, max {max(cleaned):.1f}); "
        f"ready again {statistics.median(ready):.0f} s (median, max {max(ready):.0f})"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
