"""Faults of the built-in engine behind the gateway, on CPU stand-ins.

No Slurm sandbox: a real pool (gateway, broker thread, worker processes) on 127.0.0.1,
driven over HTTP, as tests/unit/serve does. Each test asserts what the client sees and
that the model (and the other model) go on serving.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from acbslurm.serve.modelmaker import make_model
from acbslurm.serve.pool import load_pool_text
from acbslurm.serve.protocol import encode
from acbslurm.serve.runner import PoolServer

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def models() -> Iterator[dict[str, Path]]:
    # Not under pytest's basetemp: other pytest sessions of the machine's user prune
    # it (keeping their last three), and a worker restarted here reloads its model.
    with tempfile.TemporaryDirectory(prefix="acbslurm-fault-models-") as tmp:
        root = Path(tmp)
        yield {"a": make_model(root / "a", seed=1), "b": make_model(root / "b", seed=2)}


def _pool_text(models: dict[str, Path], listen: str = "127.0.0.1:0") -> str:
    return f"""\
listen: {listen}
devices: cpu:2
request_timeout: 60
models:
  - {{name: a, path: {models["a"]}, temperature: 0, max_tokens: 8}}
  - {{name: b, path: {models["b"]}, temperature: 0, max_tokens: 8}}
"""


@pytest.fixture(scope="module")
def server(models: dict[str, Path]) -> Iterator[PoolServer]:
    srv = PoolServer(load_pool_text(_pool_text(models), "faults-pool.yaml"))
    srv.start(ready_timeout=240)
    yield srv
    srv.stop()


@pytest.fixture
def http(server: PoolServer) -> Iterator[httpx.Client]:
    """A client of the module's pool, both models serving: a test that restarts a
    worker leaves no restart under way for the next one, even when it failed."""
    with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=90) as c:
        _wait("both models ready", lambda: _both_ready(c), 240)
        yield c


def _both_ready(c: httpx.Client) -> bool:
    r = c.get("/health")
    return r.status_code == 200 and set(r.json().get("models", {}).values()) == {"ready"}


def _wait(what: str, ok: Callable[[], Any], seconds: float = 120) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got = ok()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"not within {seconds:g} s: {what}")


def _answered(http: httpx.Client, model: str, **extra: Any) -> dict[str, Any]:
    body = {"model": model, "prompt": "Hello", "max_tokens": 3, **extra}
    r = http.post("/v1/completions", json=body)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    assert out["usage"]["completion_tokens"] == 3
    return out


def _error(r: httpx.Response, status: int = 400) -> dict[str, Any]:
    assert r.status_code == status, r.text
    err: dict[str, Any] = r.json()["error"]
    assert err["type"] and err["code"], err  # OpenAI's shape, a code to act on
    return err


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) << 10
    raise AssertionError("no VmRSS")


def test_bad_sampling_values_are_400_and_the_model_serves_on(http: httpx.Client) -> None:
    # seed 10**30 used to kill the worker's thread: the model then hung for good
    bad = {
        "seed": 10**30,
        "temperature": 5,
        "top_p": 2,
        "max_tokens": -1,
        "n": 3,
        "stop": ["x"] * 5,
    }
    for key, value in bad.items():
        # sampled (temperature > 0): the seed reaches torch's generator
        body = {"model": "a", "prompt": "hi", "temperature": 0.8, key: value}
        r = http.post("/v1/completions", json=body)
        err = _error(r)
        assert err["param"] == key and err["message"].startswith(key), err
    _answered(http, "a", seed=2**64 - 1, temperature=0.8)  # the largest seed torch takes
    assert http.get("/health").status_code == 200


def test_worker_losing_a_thread_exits_and_is_restarted(
    server: PoolServer, http: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    handle = server.gateway.handles["a"]
    restarts = handle.restarts
    outcome: list[httpx.Response] = []
    long = threading.Thread(
        target=lambda: outcome.append(
            http.post("/v1/completions", json={"model": "a", "prompt": "Hi", "max_tokens": 450})
        )
    )
    before = handle.deltas
    long.start()
    _wait("the long request decoding", lambda: handle.deltas > before, 30)
    # A message its tokenizing thread cannot take (messages that are not a list; the
    # protocol checks fields are there, the gateway what they hold): the thread fails.
    # Before, such a thread died alone and the process lived on, answering nothing.
    assert handle.writer is not None and handle._task is not None
    bad = encode({"type": "generate", "id": "bad", "messages": 5})
    handle._task.get_loop().call_soon_threadsafe(handle.writer.write, bad)
    t0 = time.monotonic()
    long.join(30)
    # 503 at once (the worker exited), not after request_timeout (60 s)
    assert outcome and outcome[0].status_code == 503 and time.monotonic() - t0 < 20
    assert _error(outcome[0], 503)["code"] == "worker_restarted"

    def down() -> dict[str, Any] | None:
        r = http.get("/health")
        body: dict[str, Any] = r.json()
        a_down = body["models"]["a"] != "ready" and "a" in body["reasons"]
        return body if r.status_code == 503 and a_down else None

    health = _wait("/health saying a cannot serve, and why", down, 10)
    assert health["models"]["b"] == "ready", health
    # 6: the worker's exit when a thread failed (its stderr has the traceback and the
    # line "worker exits: thread tokenizer failed: TypeError: ...")
    assert "the worker exited (6)" in health["reasons"]["a"]
    metrics = http.get("/metrics").text
    assert 'acbslurm_serve_worker_up{model="a"} 0.0' in metrics
    assert 'acbslurm_serve_worker_up{model="b"} 1.0' in metrics
    _answered(http, "b")  # the other model serves meanwhile
    _wait("a restarted", lambda: handle.state == "ready" and handle.restarts > restarts)
    _answered(http, "a")
    assert http.get("/health").status_code == 200
    assert 'acbslurm_serve_worker_state{model="a",state="ready"} 1.0' in http.get("/metrics").text
    assert "model a: worker exited (6); restarting" in caplog.text


def test_huge_prompt_is_refused_before_tokenizing(server: PoolServer, http: httpx.Client) -> None:
    handle = server.gateway.handles["a"]
    assert handle.proc is not None
    rss = _rss(handle.proc.pid)
    huge = "GPU " * (7_800_000 // 4)  # just under the 8 MiB body limit
    answers: list[tuple[httpx.Response, float]] = []

    def post(body: dict[str, Any]) -> None:
        t0 = time.monotonic()
        r = http.post("/v1/completions", json=body)
        answers.append((r, time.monotonic() - t0))

    big = threading.Thread(target=post, args=({"model": "a", "prompt": huge, "max_tokens": 3},))
    big.start()
    small = _answered(http, "a")  # meanwhile, to the same model
    big.join(60)
    r, took = answers[0]
    err = _error(r)
    assert err["code"] == "context_length_exceeded" and err["param"] == "prompt"
    assert "7800000 characters" in err["message"] and "context of 512 tokens" in err["message"]
    assert took < 10, took  # was 19.6 s, the tokenizer's time
    assert small["choices"]
    r = http.post(
        "/v1/chat/completions",
        json={"model": "a", "messages": [{"role": "user", "content": huge}], "max_tokens": 3},
    )
    assert _error(r)["param"] == "messages"
    # The worker never saw the text: it grew from 367 MB to 1.57 GB before, for good.
    assert _rss(handle.proc.pid) < rss + (64 << 20), (rss, _rss(handle.proc.pid))
    # Under the bound but over the context: the worker counts the tokens (its 400).
    r = http.post("/v1/completions", json={"model": "a", "prompt": "GPU " * 600, "max_tokens": 3})
    err = _error(r)
    assert err["code"] == "context_length_exceeded" and "512 tokens" in err["message"]
    _answered(http, "a")


def test_lone_surrogate_is_a_clean_400(http: httpx.Client) -> None:
    headers = {"Content-Type": "application/json"}
    bodies = {
        "prompt": b'{"model": "a", "prompt": "bad \\ud800 text", "max_tokens": 3}',
        # raw surrogate bytes: json.loads lets them through too
        "messages[0].content": (
            b'{"model": "a", "messages": [{"role": "user", "content": "x\xed\xa0\x80"}]}'
        ),
        "model": b'{"model": "a\\udfff", "prompt": "x"}',
    }
    for param, raw in bodies.items():
        url = "/v1/chat/completions" if b"messages" in raw else "/v1/completions"
        err = _error(http.post(url, content=raw, headers=headers))
        assert (err["param"], err["code"], err["type"]) == (
            param,
            "invalid_unicode",
            "invalid_request_error",
        )
        assert err["message"] == f"{param}: not valid Unicode: " + err["message"].split(": ", 2)[2]
        assert "tokeniz" not in err["message"] and "surrogate" in err["message"]
    _answered(http, "a")


def test_client_gone_before_its_body_is_quiet(
    server: PoolServer, http: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="acbslurm.serve.gateway")
    # uvicorn logs "Exception in ASGI application" to a logger that does not propagate
    seen: list[logging.LogRecord] = []
    catch = logging.Handler()
    catch.emit = seen.append  # type: ignore[method-assign]
    uv = logging.getLogger("uvicorn.error")
    uv.addHandler(catch)
    try:
        with socket.create_connection(("127.0.0.1", server.port)) as s:
            s.sendall(
                b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b'Content-Length: 1000\r\n\r\n{"model": "a", "pro'
            )
        _wait(
            "the gateway's note of it",
            lambda: any("went away before sending" in r.getMessage() for r in caplog.records),
            20,
        )
        _answered(http, "a")
    finally:
        uv.removeHandler(catch)
    loud = [r for r in [*caplog.records, *seen] if r.levelno >= logging.WARNING or r.exc_info]
    assert not loud, [r.getMessage() for r in loud]
    notes = [r for r in caplog.records if "went away" in r.getMessage()]
    assert len(notes) == 1 and notes[0].levelno == logging.INFO


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _health(port: int) -> dict[str, Any]:
    try:
        r = httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)
    except httpx.HTTPError:
        return {}
    body: dict[str, Any] = r.json()
    return body


def test_sigterm_leaves_no_worker_folders(tmp_path: Path, models: dict[str, Path]) -> None:
    port = _free_port()
    pool = tmp_path / "pool.yaml"
    pool.write_text(_pool_text(models, f"127.0.0.1:{port}"))
    tmp = tmp_path / "tmp"  # the gateway's and the workers' TMPDIR, this test's alone
    tmp.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp)}
    # A file, not a pipe: an unread pipe could fill and stall the pool's logging.
    log = tmp_path / "serve.log"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "acbslurm", "serve", str(pool)], env=env, stderr=err
        )
    try:
        _wait("the pool up", lambda: _health(port).get("status") == "ok", 240)
        # a worker killed and restarted on the way: each life had a folder
        worker = int(
            subprocess.run(
                ["pgrep", "-P", str(proc.pid), "-f", "acbslurm.serve.engines.builtin.worker"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()[0]
        )
        os.kill(worker, signal.SIGKILL)
        _wait("a worker restarting", lambda: _health(port).get("status") == "degraded", 30)
        _wait("the pool up again", lambda: _health(port).get("status") == "ok", 240)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    left = [p.name for p in tmp.iterdir() if p.name.startswith("acbslurm-w-")]
    assert not left, left
    assert b"Traceback" not in log.read_bytes()


def test_health_reports_each_model(http: httpx.Client) -> None:
    body = http.get("/health").json()
    assert body == {"status": "ok", "models": {"a": "ready", "b": "ready"}, "reasons": {}}
    assert json.loads(http.get("/v1/models").text)["data"][0]["id"] == "a"


# -- one device for two models: a hung model must not keep it ---------------------------

HANG = 3.0  # s: the hang_timeout of the one-device pool


@pytest.fixture(scope="module")
def one_device(models: dict[str, Path]) -> Iterator[PoolServer]:
    """Both models on one device, so that b waits for a's lease; decoding slowed (a
    long request keeps a's turn going for seconds) and a short hang_timeout."""
    text = f"""\
listen: 127.0.0.1:0
devices: cpu:1
request_timeout: 120
hang_timeout: {HANG}
models:
  - {{name: a, path: {models["a"]}, temperature: 0, max_tokens: 8}}
  - {{name: b, path: {models["b"]}, temperature: 0, max_tokens: 8}}
"""
    srv = PoolServer(
        load_pool_text(text, "one-device.yaml"), env={"ACBSLURM_SERVE_TOKEN_DELAY": "0.02"}
    )
    srv.start(ready_timeout=240)
    yield srv
    srv.stop()


@pytest.fixture
def oai(one_device: PoolServer) -> Iterator[Any]:
    import openai

    with httpx.Client(base_url=f"http://127.0.0.1:{one_device.port}", timeout=30) as c:
        _wait("both models ready", lambda: _both_ready(c), 240)
    with openai.OpenAI(
        base_url=f"http://127.0.0.1:{one_device.port}/v1",
        api_key="none",
        max_retries=0,
        timeout=60,
    ) as client:
        yield client


def _two_long_requests(client: Any, model: str, outcome: dict[str, Any]) -> list[threading.Thread]:
    """A streamed and a non-streamed 450-token completion of ``model``, each on a
    thread started here; what each ends with lands in ``outcome`` ("stream", "whole")."""
    import openai

    def streamed() -> None:
        try:
            for _ in client.completions.create(
                model=model, prompt="Hi", max_tokens=450, stream=True
            ):
                pass
            outcome["stream"] = "ended"
        except openai.APIError as exc:
            outcome["stream"] = exc

    def whole() -> None:
        try:
            client.completions.create(model=model, prompt="Hello", max_tokens=450)
            outcome["whole"] = "answered"
        except openai.APIStatusError as exc:
            outcome["whole"] = exc

    threads = [threading.Thread(target=streamed), threading.Thread(target=whole)]
    for t in threads:
        t.start()
    return threads


def test_hung_worker_fails_its_requests_and_frees_the_device(
    one_device: PoolServer, oai: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """a's worker stopped (SIGSTOP) mid-decoding, one streamed and one non-streamed
    request in flight: within hang_timeout it is declared hung, both clients get the
    model_hung error (the stream an error event the official client raises on, the
    other a 504), b, which waited for the device, is served, and a restarts."""
    import openai

    a = one_device.gateway.handles["a"]
    restarts = a.restarts
    outcome: dict[str, Any] = {}
    before = a.deltas
    threads = _two_long_requests(oai, "a", outcome)
    _wait("both decoding", lambda: a.busy and len(a.pending) == 2 and a.deltas > before + 2, 30)
    assert a.proc is not None
    pid = a.proc.pid
    os.kill(pid, signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        r = oai.completions.create(model="b", prompt="my turn", max_tokens=3)
        served = time.monotonic() - t0
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)  # a worker not killed (a failed test) goes on
    assert r.choices[0].finish_reason == "length"
    for t in threads:
        t.join(30)
    stream, whole_ = outcome["stream"], outcome["whole"]
    assert isinstance(stream, openai.APIError) and not isinstance(stream, openai.APIStatusError)
    assert stream.code == "model_hung" and "model a hung" in stream.message, stream
    assert isinstance(whole_, openai.APIStatusError) and whole_.status_code == 504, whole_
    assert whole_.code == "model_hung" and "model a hung" in whole_.message
    # b waited for the hang to be declared, and no longer than a few beats after it
    assert HANG <= served < HANG + 10, served
    print(f"b served {served:.2f} s after a's worker was stopped (hang_timeout {HANG:g} s)")
    hung = [r for r in caplog.records if "hung: worker pid" in r.getMessage()]
    assert len(hung) == 1 and f"worker pid {pid} " in hung[0].getMessage()
    assert hung[0].levelno == logging.ERROR
    with httpx.Client(base_url=f"http://127.0.0.1:{one_device.port}", timeout=30) as c:
        assert c.get("/health").json()["hangs"] == {"a": 1}
        assert 'acbslurm_serve_hangs_total{model="a"} 1.0' in c.get("/metrics").text
        _wait("a restarted", lambda: a.state == "ready" and a.restarts > restarts, 240)
        assert _both_ready(c)
    r = oai.completions.create(model="a", prompt="back", max_tokens=3)
    assert r.choices[0].finish_reason == "length"


def test_non_streamed_request_is_cancelled_when_its_client_leaves(one_device: PoolServer) -> None:
    """A client that hangs up on a non-streamed request: the worker stops decoding it,
    a's turn ends and b gets the device, long before the request would have ended."""
    a = one_device.gateway.handles["a"]
    _wait("a idle", lambda: not a.busy and not a.pending, 30)
    before = a.deltas
    with httpx.Client(base_url=f"http://127.0.0.1:{one_device.port}", timeout=30) as c:
        body = json.dumps({"model": "a", "prompt": "Hi", "max_tokens": 450}).encode()
        s = socket.create_connection(("127.0.0.1", one_device.port))
        s.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        _wait("a decoding it", lambda: a.busy and a.deltas > before + 2, 30)
        s.close()
        t0 = time.monotonic()
        _wait("a's turn over", lambda: not a.busy and not a.pending, 10)
        took = time.monotonic() - t0
        decoded = a.deltas - before
        # 450 tokens at 0.02 s each take 9 s: it was stopped, not finished
        assert decoded < 300, decoded
        r = c.post("/v1/completions", json={"model": "b", "prompt": "Hi", "max_tokens": 3})
        assert r.status_code == 200, r.text
        assert (
            'acbslurm_serve_requests_total{key="-",model="a",status="499"} 1.0'
            in c.get("/metrics").text
        )
    print(f"a's turn ended {took:.2f} s after its client left, {decoded} of 450 tokens decoded")
