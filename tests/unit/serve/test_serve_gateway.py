"""A real pool on 127.0.0.1 driven by the official ``openai`` client (and curl for SSE).

One pool for the module: A:4 + B:4 + C:8 (the ACB demo's shape) on 8 CPU stand-in devices
of 256 KiB, so that C's turn evicts A and B and theirs evict C. The fault tests
(worker killed mid-batch) run last.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from servehelp import _get, _metric, long_request_in_flight, openai_client, reference

from acbslurm.serve.brokerhost import overlaps
from acbslurm.serve.pool import load_pool_text
from acbslurm.serve.runner import PoolServer

MODELS = ("model-a", "model-b", "model-c")
PROMPTS = ("The broker lends GPUs", "Hello, world!", "What is a GPU?", "Retrieval augmented")


@pytest.fixture(scope="module")
def server(tiny_models: dict[str, Path]) -> Iterator[PoolServer]:
    text = f"""\
listen: 127.0.0.1:0
devices: cpu:8:256K
policy: quantum
quantum: 0.2
max_queue: 16
request_timeout: 60
models:
  - {{name: model-a, path: {tiny_models["model-a"]}, devices: 4,
      temperature: 0, headroom: 32K, max_tokens: 8}}
  - {{name: model-b, path: {tiny_models["model-b"]}, devices: 4,
      temperature: 0, headroom: 32K, max_tokens: 8}}
  - {{name: model-c, path: {tiny_models["model-c"]}, devices: 8,
      temperature: 0, headroom: 32K, max_tokens: 8}}
"""
    pool = load_pool_text(text, "test-pool.yaml")
    srv = PoolServer(pool, env={"ACBSLURM_SERVE_TOKEN_DELAY": "0.002"})
    srv.start(ready_timeout=240)
    yield srv
    srv.stop()


@pytest.fixture
def client(server: PoolServer) -> openai.OpenAI:
    return openai_client(server)


def test_models_health_and_unknown_routes(server: PoolServer, client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == list(MODELS)
    assert client.models.retrieve("model-b").id == "model-b"
    status, body = _get(server, "/health")
    assert status == 200 and json.loads(body)["models"] == dict.fromkeys(MODELS, "ready")
    status, body = _get(server, "/v2/nothing")
    assert status == 404 and json.loads(body)["error"]["code"] == "not_found"


def test_the_other_routes_are_not_served_by_the_builtin_engine(client: openai.OpenAI) -> None:
    """Embeddings, responses, audio: vLLM's routes; a built-in model answers 404 in
    OpenAI's shape naming itself (docs/serve.md, *Routes*)."""
    with pytest.raises(openai.NotFoundError) as e:
        client.embeddings.create(model="model-a", input="hello")
    err = e.value.body
    assert (err["param"], err["code"]) == ("model", "model_not_supported")
    assert err["message"].startswith("The model 'model-a' does not serve /v1/embeddings; it")
    with pytest.raises(openai.NotFoundError, match="'model-b' does not serve /v1/responses"):
        client.responses.create(model="model-b", input="hello")
    with pytest.raises(openai.NotFoundError, match="does not serve /v1/audio/transcriptions"):
        client.audio.transcriptions.create(model="model-c", file=("a.wav", b"RIFF"))


def test_completion_chat_and_usage(client: openai.OpenAI) -> None:
    r = client.completions.create(model="model-a", prompt="Hello", max_tokens=5)
    assert r.object == "text_completion" and r.model == "model-a"
    assert r.usage is not None and r.usage.completion_tokens == 5 and r.usage.prompt_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + 5
    assert r.choices[0].finish_reason == "length"
    mine = r.model_extra["metrics"]["acbslurm"]  # the pool's metrics, on every answer
    assert mine["gpu_seconds"] > 0 and mine["gpus"] and mine["compute_s"] > 0
    c = client.chat.completions.create(
        model="model-c",
        messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
    )
    assert c.choices[0].message.role == "assistant" and isinstance(
        c.choices[0].message.content, str
    )
    assert c.usage is not None and c.usage.completion_tokens == 8  # the pool's max_tokens default


def test_streaming_matches_non_streaming(client: openai.OpenAI) -> None:
    full = (
        client.completions.create(model="model-b", prompt="What is", max_tokens=12).choices[0].text
    )
    chunks = list(
        client.completions.create(
            model="model-b",
            prompt="What is",
            max_tokens=12,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert "".join(c.choices[0].text for c in chunks if c.choices) == full
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 12
    chat = list(
        client.chat.completions.create(
            model="model-a", messages=[{"role": "user", "content": "hi"}], max_tokens=6, stream=True
        )
    )
    assert chat[0].choices[0].delta.role == "assistant"
    assert chat[-1].choices[0].finish_reason == "length"


def test_sse_with_curl(server: PoolServer) -> None:
    body = json.dumps({"model": "model-a", "prompt": "Hi", "max_tokens": 4, "stream": True})
    out = subprocess.run(
        [
            "curl",
            "-sN",
            "-H",
            "Content-Type: application/json",
            "-d",
            body,
            f"http://127.0.0.1:{server.port}/v1/completions",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    events = [line[len("data: ") :] for line in out.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    assert json.loads(events[-2])["choices"][0]["finish_reason"] == "length"


def test_sampling_with_seed_is_reproducible(client: openai.OpenAI) -> None:
    def once() -> str:
        r = client.completions.create(
            model="model-a", prompt="The", max_tokens=10, temperature=1.0, top_p=0.9, seed=7
        )
        return r.choices[0].text

    assert once() == once()


def test_error_bodies(server: PoolServer, client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as nf:
        client.completions.create(model="gpt-9", prompt="x")
    err = nf.value.body
    assert isinstance(err, dict) and err["code"] == "model_not_found" and err["param"] == "model"
    assert all(m in err["message"] for m in MODELS)
    with pytest.raises(openai.BadRequestError) as bad:
        client.completions.create(model="model-a", prompt="x", temperature=5)
    assert isinstance(bad.value.body, dict) and bad.value.body["param"] == "temperature"
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model="model-a", messages=[{"role": "user"}])  # type: ignore[typeddict-item]
    assert isinstance(bad.value.body, dict) and bad.value.body["param"] == "messages[0].content"
    r = httpx.post(f"http://127.0.0.1:{server.port}/v1/completions", content=b"{not json")
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"


def test_oversized_prompt_is_400_for_both_apis(client: openai.OpenAI) -> None:
    huge = "GPU " * 100_000  # far more than the tiny model's 512 positions
    with pytest.raises(openai.BadRequestError) as bad:
        client.completions.create(model="model-a", prompt=huge, max_tokens=4)
    assert isinstance(bad.value.body, dict) and bad.value.body["code"] == "context_length_exceeded"
    assert bad.value.body["param"] == "prompt"
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(
            model="model-c", messages=[{"role": "user", "content": huge}], max_tokens=4, stream=True
        )
    with pytest.raises(openai.BadRequestError) as bad:
        client.completions.create(model="model-a", prompt="hi", max_tokens=100_000)
    assert isinstance(bad.value.body, dict) and bad.value.body["param"] == "max_tokens"


def test_client_disconnect_mid_stream(server: PoolServer, client: openai.OpenAI) -> None:
    stream = client.completions.create(model="model-c", prompt="Hello", max_tokens=400, stream=True)
    for _ in stream:
        break
    stream.close()
    handle = server.gateway.handles["model-c"]
    deadline = time.monotonic() + 10
    while handle.queue_length and time.monotonic() < deadline:
        time.sleep(0.02)
    assert handle.queue_length == 0
    assert (
        client.completions.create(model="model-c", prompt="Hello", max_tokens=2).usage is not None
    )


def test_rag_load_on_all_models_acceptance(
    server: PoolServer, client: openai.OpenAI, tiny_models: dict[str, Path]
) -> None:
    """Concurrent RAG-like clients (request, then a think/I-O pause), demand shifting
    between the models: every request answered, greedy outputs equal to the model
    served alone, no device ever leased to two models, evictions and restores."""
    expected = {(m, p): reference(tiny_models[m], p, 8) for m in MODELS for p in PROMPTS}
    results: list[tuple[str, str, str]] = []
    errors: list[BaseException] = []

    def user(k: int) -> None:
        rng = random.Random(k)
        try:
            for i in range(6):
                # demand shifts: early on mostly A/B, later mostly C
                model = rng.choice(MODELS[:2] if i < 3 and k % 2 else MODELS)
                prompt = rng.choice(PROMPTS)
                r = client.completions.create(
                    model=model, prompt=prompt, max_tokens=8, temperature=0
                )
                results.append((model, prompt, r.choices[0].text))
                time.sleep(rng.uniform(0.0, 0.05))  # retrieval / I-O pause
        except BaseException as exc:
            errors.append(exc)

    before = server.broker.snapshot() if server.broker else {}
    threads = [threading.Thread(target=user, args=(k,)) for k in range(9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert len(results) == 9 * 6
    for model, prompt, text in results:
        assert text == expected[(model, prompt)], (model, prompt)
    assert server.broker is not None
    snap = server.broker.snapshot()
    assert snap["violations"] == []
    assert overlaps(snap["record"]) == []
    assert worker_view_overlaps(server) == []
    assert snap["evictions"] > before["evictions"]
    names = {r.client for r in snap["record"]}
    assert {f"serve:{m}" for m in MODELS} <= names
    _, metrics = _get(server, "/metrics")
    swaps_in = {m: _metric(metrics, "acbslurm_serve_swaps_in_total", m) for m in MODELS}
    swaps_out = {m: _metric(metrics, "acbslurm_serve_swaps_out_total", m) for m in MODELS}
    assert sum(swaps_out.values()) > 0 and sum(swaps_in.values()) > len(
        MODELS
    )  # restores after evictions
    assert _metric(metrics, "acbslurm_serve_requests_total", "model-a", 'status="200"') > 0
    assert _metric(metrics, "acbslurm_serve_tokens_total", "model-c", 'kind="completion"') > 0
    assert _metric(metrics, "acbslurm_serve_gpu_wait_seconds_total", "model-c") > 0


def worker_view_overlaps(server: PoolServer) -> list[str]:
    """Leases as the workers saw them (grant read .. release sent): none may overlap
    on a device across models."""
    spans = [
        (dev, t0, t1, name)
        for name, h in server.gateway.handles.items()
        for devices, t0, t1 in list(h.lease_log)
        for dev in devices
    ]
    assert {s[3] for s in spans} == set(MODELS)
    bad = []
    spans.sort()
    for a, b in itertools.pairwise(spans):
        if a[0] == b[0] and a[3] != b[3] and b[1] < a[2]:
            bad.append(f"{a[0]}: {a[3]} until {a[2]:.6f}, {b[3]} from {b[1]:.6f}")
    return bad


def test_flood_gets_429_not_a_hang(server: PoolServer) -> None:
    async def flood() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=1000)
        async with httpx.AsyncClient(timeout=60, limits=limits) as c:
            url = f"http://127.0.0.1:{server.port}/v1/completions"
            body = {"model": "model-b", "prompt": "flood", "max_tokens": 2}
            return await asyncio.gather(*(c.post(url, json=body) for _ in range(1000)))

    t0 = time.monotonic()
    answers = asyncio.run(flood())
    assert time.monotonic() - t0 < 90
    codes = [r.status_code for r in answers]
    print("flood:", {c: codes.count(c) for c in set(codes)}, f"{time.monotonic() - t0:.1f}s")
    assert set(codes) <= {200, 429}, set(codes)
    assert codes.count(429) > 0 and codes.count(200) > 0
    limited = next(r for r in answers if r.status_code == 429)
    assert limited.headers["Retry-After"] and limited.json()["error"]["code"] == "overloaded"
    assert _get(server, "/health")[0] == 200


def test_worker_killed_mid_batch_gets_503_and_restarts(
    server: PoolServer, client: openai.OpenAI
) -> None:
    handle = server.gateway.handles["model-a"]
    assert handle.proc is not None
    pid = handle.proc.pid
    t, outcome = long_request_in_flight(client, "model-a", handle)
    os.kill(pid, signal.SIGKILL)
    t.join(30)
    assert len(outcome) == 1 and isinstance(outcome[0], openai.InternalServerError)
    assert outcome[0].status_code == 503
    # The model answers 503 with Retry-After while restarting, then works again.
    deadline = time.monotonic() + 180
    while handle.state != "ready" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (
        handle.state == "ready"
        and handle.restarts == 1
        and handle.proc is not None
        and handle.proc.pid != pid
    )
    r = client.completions.create(model="model-a", prompt="Hello", max_tokens=3)
    assert r.usage is not None and r.usage.completion_tokens == 3
    assert server.broker is not None
    snap = server.broker.snapshot()
    assert overlaps(snap["record"]) == [] and snap["violations"] == []
    assert sorted(snap["clients"].values()) == sorted(
        f"serve:{m}" for m in MODELS
    )  # no leaked session


def test_deeply_nested_json_is_a_400_not_a_500(server: PoolServer) -> None:
    # 100 kB of "[" is under the body limit; json.loads raises RecursionError, no ValueError
    url = f"http://127.0.0.1:{server.port}/v1/chat/completions"
    r = httpx.post(url, content=b"[" * 100_000)
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"


def test_a_stopping_pool_answers_the_queued_503_and_lets_the_running_finish(
    tiny_models: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    """The pool stops (as on SIGTERM: uvicorn's shutdown) with one stream being decoded
    and four requests queued behind it (max_batch 1): the four get 503 `pool_stopping`
    with Retry-After at once, in OpenAI's shape; the stream finishes whole within the
    grace; one line says so, and nothing logs a traceback."""
    text = f"""\
listen: 127.0.0.1:0
devices: cpu:1
models:
  - {{name: a, path: {tiny_models["model-a"]}, max_batch: 1, temperature: 0}}
"""
    srv = PoolServer(load_pool_text(text, "p.yaml"), env={"ACBSLURM_SERVE_TOKEN_DELAY": "0.05"})
    srv.start(ready_timeout=240)
    handle = srv.gateway.handles["a"]
    url = f"http://127.0.0.1:{srv.port}/v1/completions"

    async def until(what: str, pred: Any) -> None:
        deadline = time.monotonic() + 30
        while not pred():
            assert time.monotonic() < deadline, what
            await asyncio.sleep(0.01)

    async def stop_with_requests() -> tuple[str, list[httpx.Response]]:
        async with httpx.AsyncClient(timeout=60) as c:

            async def stream() -> str:
                body = {"model": "a", "prompt": "Hi", "max_tokens": 30, "stream": True}
                async with c.stream("POST", url, json=body) as r:
                    assert r.status_code == 200
                    return "".join([t async for t in r.aiter_text()])

            running = asyncio.ensure_future(stream())
            await until(
                "the stream decoded", lambda: any(p.started for p in handle.pending.values())
            )
            body = {"model": "a", "prompt": "Hi", "max_tokens": 30}
            queued = [asyncio.ensure_future(c.post(url, json=body)) for _ in range(4)]
            await until("four queued", lambda: len(handle.pending) == 5)
            stopping = asyncio.get_running_loop().run_in_executor(None, srv.stop)
            answers = list(await asyncio.gather(*queued))
            streamed = await running
            await stopping
            return streamed, answers

    caplog.set_level(logging.INFO)
    try:
        streamed, answers = asyncio.run(stop_with_requests())
    finally:
        srv.stop()
    for r in answers:
        assert r.status_code == 503 and r.headers["Retry-After"] == "30", r.text
        assert r.json()["error"]["code"] == "pool_stopping", r.text
    events = [e for e in streamed.split("\n\n") if e.startswith("data: ")]
    assert events[-1] == "data: [DONE]", streamed
    assert json.loads(events[-2][6:])["choices"][0]["finish_reason"] == "length", streamed
    said = [r.getMessage() for r in caplog.records if r.name.startswith("acbslurm")]
    assert [m for m in said if m.startswith("stopping:")] == [
        "stopping: 4 queued request(s) answered 503; 1 being computed, 0 of them ended "
        "with an error after the 4s grace"
    ], said
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR], said
