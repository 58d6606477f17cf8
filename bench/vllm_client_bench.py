#!/usr/bin/env python3
"""The vLLM worker's client: acbslurm.unixhttp over the server's unix socket (what
engines/vllm/client.py uses), the standard library's http.client (what it used before)
and httpx over the same socket.

A Starlette app under uvicorn on a unix socket (vLLM's own server stack) answers a
JSON body like a non-streamed completion, and streams 64 server-sent events like a
streamed one. Each client sends the same requests one after another; the bench prints
the mean time per request for each and the ratio. Run it on a quiet machine:

    .venv/bin/python bench/vllm_client_bench.py [--requests 400]

What it decides (docs/serve.md, *The vLLM engine*): the worker keeps http.client when
httpx costs more per request, since the gateway's time beside vLLM's is what the pool's
speed goal counts; httpx would bring nothing the worker lacks (timeouts are set on the
socket, a request is cancelled by shutting its socket down).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from acbslurm import unixhttp

EVENTS = 64
ANSWER = {"id": "cmpl-1", "object": "text_completion", "choices": [{"text": "x" * 256}]}


async def whole(request: Request) -> JSONResponse:
    await request.body()
    return JSONResponse(ANSWER)


async def streamed(request: Request) -> StreamingResponse:
    await request.body()

    async def events() -> AsyncIterator[bytes]:
        for i in range(EVENTS):
            yield f"data: {json.dumps({'i': i, 'text': 'tok'})}\n\n".encode()
        yield b"data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


class UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=10)
        self.unix_path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


BODY = json.dumps({"model": "m", "prompt": "hello", "max_tokens": 64}).encode()


def stdlib(uds: str, path: str) -> int:
    conn = UnixHTTP(uds)
    try:
        conn.request("POST", path, body=BODY, headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        if path == "/stream":
            return sum(1 for line in r if line.startswith(b"data: "))
        return len(r.read())
    finally:
        conn.close()


def ours(uds: str, path: str) -> int:
    sock = unixhttp.connect(uds, 10)
    try:
        sock.sendall(unixhttp.request("POST", path, BODY, {"Content-Type": "application/json"}))
        r = unixhttp.Answer(sock)
        if path == "/stream":
            return sum(1 for line in r.lines() if line.startswith(b"data: "))
        return len(r.read())
    finally:
        sock.close()


def with_httpx(client: httpx.Client, path: str) -> int:
    headers = {"Content-Type": "application/json"}
    with client.stream("POST", f"http://localhost{path}", content=BODY, headers=headers) as r:
        if path == "/stream":
            return sum(1 for line in r.iter_lines() if line.startswith("data: "))
        return len(r.read())


def timed(n: int, fn: Any, *args: Any) -> float:
    fn(*args)  # warm
    t0 = time.perf_counter()
    for _ in range(n):
        fn(*args)
    return (time.perf_counter() - t0) / n


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=400)
    args = p.parse_args()
    folder = tempfile.mkdtemp(prefix="acbslurm-clientbench-")
    uds = os.path.join(folder, "s.sock")
    routes = [
        Route("/whole", whole, methods=["POST"]),
        Route("/stream", streamed, methods=["POST"]),
    ]
    app = Starlette(routes=routes)
    server = uvicorn.Server(uvicorn.Config(app, uds=uds, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    fresh = httpx.HTTPTransport(uds=uds)
    kept = httpx.Client(transport=httpx.HTTPTransport(uds=uds), timeout=10)
    print(f"{args.requests} requests each, one at a time; mean ms per request")
    print(
        f"{'route':<8} {'unixhttp':>9} {'http.client':>12} {'httpx kept':>11} {'httpx new':>10} "
        f"{'ratio kept':>11}"
    )
    for path in ("/whole", "/stream"):
        u = timed(args.requests, ours, uds, path)
        a = timed(args.requests, stdlib, uds, path)
        b = timed(args.requests, with_httpx, kept, path)

        def new_client(path: str = path) -> int:
            with httpx.Client(transport=fresh, timeout=10) as c:
                return with_httpx(c, path)

        c = timed(args.requests, new_client)
        print(
            f"{path:<8} {u * 1e3:>9.3f} {a * 1e3:>12.3f} {b * 1e3:>11.3f} {c * 1e3:>10.3f} "
            f"{b / u:>10.2f}x"
        )
    kept.close()
    server.should_exit = True
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
