"""Every route vLLM serves, through the pool (docs/serve.md, *Routes*), as user1 runs it:
``acbslurm serve`` started as user1 on the vLLM demo's own models (a chat model with a
tool-call parser, the embedding model and the Whisper of ``serve --demo --engine
vllm``: ``modelmaker``), driven by the official ``openai`` client with two keys.
Each answer is compared with the same request sent to the model's own vLLM server
(reached on its private socket, as only the test can): embeddings, responses (whole
and streamed), a transcription and a translation of a WAV upload, chat with tools
and ``response_format``. A route a model does not serve is a 404 naming it; an
upload over ``max_audio`` a 413. Each answer carries the pool's metrics beside
vLLM's, and the requests' GPU-seconds add up to the key's ``/usage``.

One pool for the module: three vLLM starts (about a minute each on two cores).
"""

from __future__ import annotations

import io
import json
import math
import os
import pwd
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
import warnings
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from test_serve_vllm import alive, descendants, server_folder, vllm_env

from acbslurm.serve.engines.vllm.server import default_python
from acbslurm.serve.modelmaker import demo_extra_yaml

pytestmark = pytest.mark.skipif(
    not Path(default_python()).is_file(),
    reason=f"no vLLM environment at {default_python()} (scripts/setup.sh makes .venv-vllm)",
)

REPO = Path(__file__).resolve().parents[3]
USER = "user1"
KEYS = {"user1": "sk-user1-routes-0123456789abcdef", "alice": "sk-alice-routes-0123456789abcdef"}
MAX_AUDIO = 256 << 10
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


def tone_wav(seconds: float = 1.0) -> bytes:
    """A 440 Hz tone, 16 kHz mono PCM: what Whisper's feature extractor reads."""
    rate = 16000
    frames = b"".join(
        struct.pack("<h", int(8000 * math.sin(2 * math.pi * 440 * i / rate)))
        for i in range(int(rate * seconds))
    )
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(frames)
    return buf.getvalue()


class Pool:
    def __init__(self, proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.proc = proc
        self.port = port
        self.log = log
        self.direct: dict[str, openai.OpenAI] = {}

    def client(self, key: str = "alice") -> openai.OpenAI:
        return openai.OpenAI(
            base_url=f"http://127.0.0.1:{self.port}/v1",
            api_key=KEYS[key],
            max_retries=0,
            timeout=120,
        )

    def get(self, path: str, key: str = "alice") -> Any:
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}", headers={"Authorization": f"Bearer {KEYS[key]}"}
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            data = r.read().decode()
        return json.loads(data) if path != "/metrics" else data

    def alone(self, model: str) -> openai.OpenAI:
        """The official client on the model's own vLLM server (its private socket)."""
        if model not in self.direct:
            self.direct[model] = self._alone(model)
        return self.direct[model]

    def _alone(self, model: str) -> openai.OpenAI:
        for pid in descendants(self.proc.pid):
            folder = server_folder(pid)
            if (
                folder
                and f"--served-model-name\0{model}\0".encode()
                in Path(f"/proc/{pid}/cmdline").read_bytes()
            ):
                sock = os.path.join(folder, "v.sock")
                http = httpx.Client(transport=httpx.HTTPTransport(uds=sock), timeout=120)
                return openai.OpenAI(base_url="http://vllm/v1", api_key="none", http_client=http)
        raise AssertionError(f"no vLLM server of {model}")


@pytest.fixture(scope="module")
def pool(tiny_models: dict[str, Path]) -> Iterator[Pool]:
    user = pwd.getpwnam(USER)
    # user1's own folder (pytest's are root's, 0700): the pool file, keys, models, caches
    root = Path(tempfile.mkdtemp(prefix="acbslurm-routes-"))
    try:
        yield from _pool(root, user, tiny_models)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _pool(root: Path, user: pwd.struct_passwd, tiny_models: dict[str, Path]) -> Iterator[Pool]:
    shutil.copytree(tiny_models["model-a"], root / "model-a")
    extra = "\n".join(demo_extra_yaml(root))  # the vLLM demo's models, made here
    (root / "keys.txt").write_text("".join(f"{n} {k}\n" for n, k in KEYS.items()))
    (root / "pool.yaml").write_text(
        f"""\
listen: 127.0.0.1:0
devices: cpu:3
api_keys: keys.txt
max_audio: {MAX_AUDIO}
hang_timeout: 40
models:
  - name: model-a
    path: {root / "model-a"}
    engine: vllm
    temperature: 0
    max_tokens: 8
    tool_call_parser: hermes
{extra}
"""
    )
    for p in [root, *root.rglob("*")]:
        os.chown(p, user.pw_uid, user.pw_gid)
    root.chmod(0o700)
    (root / "keys.txt").chmod(0o600)
    env = {
        "PATH": f"{REPO / '.venv' / 'bin'}:/usr/bin:/bin",
        "HOME": user.pw_dir,
        "USER": USER,
        "LOGNAME": USER,
        "XDG_CACHE_HOME": str(root / "cache"),
        "TMPDIR": str(root),
        **vllm_env(root),
    }
    log = root / "serve.log"
    address = root / "address.json"
    argv = [str(Path(sys.executable).parent / "acbslurm"), "serve", str(root / "pool.yaml")]
    argv += ["--address-file", str(address)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv,
            user=user.pw_uid,
            group=user.pw_gid,
            extra_groups=[],
            env=env,
            cwd=root,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + 600
    while not address.exists():
        assert proc.poll() is None, log.read_text()[-4000:]
        assert time.monotonic() < deadline, log.read_text()[-4000:]
        time.sleep(0.2)
    pool = Pool(proc, int(json.loads(address.read_text())["port"]), log)
    states = json.loads(address.read_text())["models"]
    assert set(states.values()) == {"ready"}, (states, log.read_text()[-4000:])
    tree = descendants(proc.pid)
    yield pool
    for c in pool.direct.values():
        c.close()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, log.read_text()[-4000:]
    deadline = time.monotonic() + 30
    while any(alive(p) for p in tree) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in tree if alive(p)], "processes left after the pool stopped"


def pool_metrics(obj: Any) -> dict[str, Any]:
    metrics = obj["metrics"] if isinstance(obj, dict) else obj.model_extra["metrics"]
    mine = metrics["acbslurm"]
    assert mine["gpu_seconds"] > 0 and mine["gpus"] and mine["compute_s"] > 0, mine
    assert {"queued_s", "wait_s", "restore_s", "compute_s"} <= set(mine), mine
    return mine


def test_a_route_a_model_does_not_serve_is_a_404_naming_it(pool: Pool) -> None:
    c = pool.client()
    with pytest.raises(openai.NotFoundError) as e:
        c.embeddings.create(model="model-a", input="hello")
    err = e.value.body
    assert err["param"] == "model" and err["code"] == "model_not_supported", err
    assert "'model-a' does not serve /v1/embeddings" in err["message"]
    assert "model-embed" in err["message"]  # who does
    with pytest.raises(openai.NotFoundError, match="'model-embed' does not serve"):
        c.chat.completions.create(model="model-embed", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.NotFoundError, match="'model-a' does not serve /v1/audio"):
        c.audio.transcriptions.create(model="model-a", file=("a.wav", tone_wav(0.1)))
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        c.embeddings.create(model="nope", input="hello")


def test_embeddings_as_vllm_alone(pool: Pool) -> None:
    ask = {"model": "model-embed", "input": ["The broker lends GPUs", "What is a GPU?"]}
    got = pool.client().embeddings.create(**ask)
    want = pool.alone("model-embed").embeddings.create(**ask)
    assert [d.index for d in got.data] == [0, 1]
    for g, w in zip(got.data, want.data, strict=True):
        assert g.embedding == pytest.approx(w.embedding, abs=1e-6)
    assert got.usage.prompt_tokens == want.usage.prompt_tokens > 0
    pool_metrics(got)


def test_responses_whole_and_streamed_as_vllm_alone(pool: Pool) -> None:
    ask = {"model": "model-a", "input": "What is a GPU?", "max_output_tokens": 8}
    ask["temperature"] = 0
    got = pool.client().responses.create(**ask)
    want = pool.alone("model-a").responses.create(**ask)
    assert got.output_text == want.output_text and got.status == want.status
    assert got.usage is not None and got.usage.output_tokens == want.usage.output_tokens
    assert "time_to_first_token_ms" in got.model_extra["metrics"]  # vLLM's own, passed on
    pool_metrics(got)
    events = list(pool.client().responses.create(**ask, stream=True))
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed", kinds
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == want.output_text
    last = events[-1].response
    assert last.output_text == want.output_text
    pool_metrics(last)


def test_transcription_and_translation_as_vllm_alone(pool: Pool) -> None:
    wav = tone_wav()
    for kind in ("transcriptions", "translations"):
        with warnings.catch_warnings():  # the client deprecates translations; vLLM has them
            warnings.simplefilter("ignore", DeprecationWarning)
            got = getattr(pool.client().audio, kind).create(
                model="model-whisper", file=("tone.wav", wav), temperature=0
            )
            want = getattr(pool.alone("model-whisper").audio, kind).create(
                model="model-whisper", file=("tone.wav", wav), temperature=0
            )
        assert got.text == want.text and got.text, kind
        pool_metrics(got)
    text = {
        c: c.audio.transcriptions.create(
            model="model-whisper", file=("tone.wav", wav), temperature=0, response_format="text"
        )
        for c in (pool.client(), pool.alone("model-whisper"))
    }
    assert len(set(text.values())) == 1, text  # the text as vLLM wrote it, nothing added
    # streamed (vLLM's own chunks, not OpenAI's events: read here as they come)
    form = {"model": "model-whisper", "temperature": "0", "stream": "true"}
    streams = []
    mine = httpx.Client(timeout=120)
    for http, url, auth in (
        (mine, f"http://127.0.0.1:{pool.port}", KEYS["alice"]),
        (pool.alone("model-whisper")._client, "http://vllm", "none"),
    ):
        r = http.post(
            f"{url}/v1/audio/transcriptions",
            files={"file": ("tone.wav", wav)},
            data=form,
            headers={"Authorization": f"Bearer {auth}"},
        )
        lines = [x[6:] for x in r.text.splitlines() if x.startswith("data: ")]
        assert lines[-1] == "[DONE]", r.text[-300:]
        streams.append(
            "".join(
                c["delta"].get("content") or ""
                for x in lines[:-1]
                for c in json.loads(x).get("choices") or ()
            )
        )
    mine.close()
    assert streams[0] == streams[1] and streams[0], streams
    with pytest.raises(openai.APIStatusError) as e:
        pool.client().audio.transcriptions.create(
            model="model-whisper", file=("big.wav", tone_wav(12.0))
        )
    assert e.value.status_code == 413 and "max_audio" in e.value.body["message"]


def test_chat_with_tools_and_response_format_as_vllm_alone(pool: Pool) -> None:
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        ask = {"model": "model-a", "messages": messages, "tools": TOOLS, "tool_choice": choice}
        ask.update(temperature=0, max_tokens=24)
        got = pool.client().chat.completions.create(**ask)
        want = pool.alone("model-a").chat.completions.create(**ask)
        g, w = got.choices[0].message, want.choices[0].message
        assert [t.function.name for t in g.tool_calls or []] == [
            t.function.name for t in w.tool_calls or []
        ]
        assert [t.function.arguments for t in g.tool_calls or []] == [
            t.function.arguments for t in w.tool_calls or []
        ]
    # "auto" needs the model's tool-call parser (tool_call_parser: in the pool file)
    auto = pool.client().chat.completions.create(
        model="model-a", messages=messages, tools=TOOLS, tool_choice="auto", max_tokens=8
    )
    assert auto.choices[0].finish_reason in ("stop", "length", "tool_calls")
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}
    ask = {"model": "model-a", "messages": messages, "response_format": fmt, "max_tokens": 24}
    got = pool.client().chat.completions.create(**ask, temperature=0)
    want = pool.alone("model-a").chat.completions.create(**ask, temperature=0)
    assert got.choices[0].message.content == want.choices[0].message.content
    stream = pool.client().chat.completions.create(
        **ask, temperature=0, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == want.choices[0].message.content
    pool_metrics(chunks[-1])  # the usage chunk: vLLM's metrics and the pool's


def test_each_route_is_billed_and_gpu_seconds_add_up(pool: Pool) -> None:
    """Every answer of the owner's key carries its GPU-seconds; once the leases have
    ended, they add up to that key's /usage (alice, the other key, sees her own rows
    only); tokens and audio seconds per key in /usage and /metrics."""
    c = pool.client("user1")
    answers: list[Any] = [
        c.embeddings.create(model="model-embed", input="one"),
        c.responses.create(model="model-a", input="two", max_output_tokens=4),
        c.audio.transcriptions.create(model="model-whisper", file=("t.wav", tone_wav())),
        c.chat.completions.create(
            model="model-a", messages=[{"role": "user", "content": "hi"}], max_tokens=4
        ),
        c.completions.create(model="model-a", prompt="three", max_tokens=4),
    ]
    events = list(
        c.responses.create(model="model-a", input="four", max_output_tokens=4, stream=True)
    )
    answers.append(events[-1].response)
    spent = sum(pool_metrics(a)["gpu_seconds"] for a in answers)

    def billed() -> float:
        rows = pool.get("/usage", "user1")["usage"]
        return sum(r["gpu_seconds"] for r in rows if r["key"] == "user1")

    deadline = time.monotonic() + 30
    while abs(billed() - spent) > 0.002:  # /usage rounds each row to the millisecond
        assert time.monotonic() < deadline, (billed(), spent)
        time.sleep(0.1)
    rows = {(r["key"], r["model"]): r for r in pool.get("/usage", "user1")["usage"]}
    assert rows[("user1", "model-whisper")]["audio_seconds"] >= 1
    assert rows[("user1", "model-embed")]["prompt_tokens"] > 0
    assert rows[("user1", "model-a")]["requests"] == 4
    assert rows[("user1", "model-a")]["completion_tokens"] > 0
    assert {r["key"] for r in pool.get("/usage", "alice")["usage"]} <= {"alice"}
    metrics = pool.get("/metrics", "user1")
    assert 'acbslurm_serve_audio_seconds_total{key="user1",model="model-whisper"}' in metrics
    assert 'acbslurm_serve_tokens_total{key="user1",kind="prompt",model="model-embed"}' in metrics
