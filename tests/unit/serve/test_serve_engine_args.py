"""``engine:``/``engine_args:`` in the pool file and the vLLM server's command line
(no vLLM started: tests/unit/serve/test_serve_vllm.py runs the real one)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from acbslurm.serve.engines.vllm.server import VllmServer, default_python
from acbslurm.serve.errors import PoolError
from acbslurm.serve.pool import ModelSpec, load_pool_text
from acbslurm.serve.worker import EXIT_THREAD


def _pool(model: str, extra: str = "") -> str:
    return f"listen: 127.0.0.1:0\ndevices: cpu:1\n{extra}models:\n  - {model}\n"


def test_engine_default_and_vllm(tmp_path: Path) -> None:
    pool = load_pool_text(_pool("{name: a, path: /m}"), "p.yaml", check_paths=False)
    assert pool.models[0].engine == "builtin" and pool.models[0].engine_args == {}
    text = _pool(
        "{name: a, path: /m, engine: vllm,"
        " engine_args: {max-num-seqs: 4, enable_prefix_caching: true}}",
        "vllm_python: venv/bin/python\n",
    )
    pool = load_pool_text(text, "p.yaml", base=tmp_path, check_paths=False)
    m = pool.models[0]
    assert m.engine == "vllm"
    assert m.engine_args == {"max_num_seqs": 4, "enable_prefix_caching": True}
    assert m.vllm_python == str(tmp_path / "venv/bin/python") == pool.vllm_python
    assert m.sleep_level == 1
    text = _pool("{name: a, path: /m, engine: vllm, sleep_level: 2}")
    assert load_pool_text(text, "p.yaml", check_paths=False).models[0].sleep_level == 2


@pytest.mark.parametrize(
    ("model", "words"),
    [
        ("{name: a, path: /m, engine: vlm}", "'vlm': one of builtin, vllm"),
        (
            "{name: a, path: /m, engine: vllm, engine_args: {tensor_parallel_size: 2}}",
            "set by acbslurm",
        ),
        ("{name: a, path: /m, engine: vllm, engine_args: {uds: /x}}", "private socket"),
        (
            "{name: a, path: /m, engine: vllm, engine_args: {enable-sleep-mode: false}}",
            "set by acbslurm",
        ),
        ("{name: a, path: /m, engine: vllm, engine_args: {device: cuda}}", "leased devices"),
        ("{name: a, path: /m, engine: vllm, engine_args: {x: [1]}}", "string, number or boolean"),
        ("{name: a, path: /m, engine: vllm, engine_args: [1]}", "mapping of vLLM options"),
        ("{name: a, path: /m, engine_args: {max_num_seqs: 2}}", "only with engine: vllm"),
        ("{name: a, path: /m, engine: vllm, sleep_level: 3}", "3: 1 (weights to host memory)"),
        ("{name: a, path: /m, engine: vllm, sleep_level: true}", "or 2 (weights discarded"),
        ("{name: a, path: /m, sleep_level: 2}", "sleep_level: only with engine: vllm"),
        ("{name: a, path: /m, engine: vllm, engine_args: {nnodes: 2}}", "one node per process"),
        ("{name: a, path: /m, engine: vllm, engine_args: {headless: true}}", "followers"),
        ("{name: a, path: /m, tool_call_parser: hermes}", "tool_call_parser: only with engine"),
        ("{name: a, path: /m, engine: vllm, tool_call_parser: 'a b'}", "a vLLM tool-call parser"),
        (
            "{name: a, path: /m, engine: vllm, tool_call_parser: hermes,"
            " engine_args: {tool_call_parser: x}}",
            "given twice",
        ),
        ("{name: a, path: /m, routes: [chat, embedings]}", "'embedings': not a route; one of"),
        ("{name: a, path: /m, routes: []}", "routes: must be a non-empty list"),
    ],
)
def test_engine_refused(model: str, words: str) -> None:
    with pytest.raises(PoolError) as info:
        load_pool_text(_pool(model), "p.yaml", check_paths=False)
    assert "p.yaml:" in str(info.value) and words in str(info.value)


def _spec(**kw: object) -> ModelSpec:
    spec: dict[str, Any] = {
        "name": "m",
        "path": "/models/m",
        "dtype": "bfloat16",
        "max_context": 0,
        "headroom": 3 << 30,
        "engine_args": {"max_num_seqs": 4, "enable_prefix_caching": True, "x_off": False},
        "vllm_python": "/v/bin/python",
    }
    spec.update(kw)
    return ModelSpec.from_dict(spec)


def test_routes_parser_and_max_audio_in_the_pool_file() -> None:
    text = _pool("{name: a, path: /m, engine: vllm, tool_call_parser: hermes, routes: [chat]}")
    pool = load_pool_text("max_audio: 1M\n" + text, "p.yaml", check_paths=False)
    (m,) = pool.models
    assert (m.tool_call_parser, m.routes, pool.max_audio) == ("hermes", ("chat",), 1 << 20)
    assert ModelSpec.from_dict(json.loads(json.dumps(m.as_dict()))) == m  # to the worker
    assert load_pool_text(text, "p.yaml", check_paths=False).max_audio == 25 << 20
    with pytest.raises(PoolError, match=r"p\.yaml:1: max_audio: must be between"):
        load_pool_text("max_audio: 1G\n" + text, "p.yaml", check_paths=False)


def test_command_on_cuda() -> None:
    s = VllmServer(_spec(), "cuda")
    try:
        devs = [SimpleNamespace(index=2), SimpleNamespace(index=5)]
        argv, env = s.command(devs)
    finally:
        s.stop()
    assert argv[:3] == ["/v/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    joined = " ".join(argv)
    assert "--tensor-parallel-size 2" in joined and f"--uds {s.uds}" in joined
    assert "--kv-cache-memory-bytes 3221225472" in joined and "--enable-sleep-mode" in argv
    assert "--enforce-eager" not in argv
    assert "--max-num-seqs 4" in joined and "--enable-prefix-caching" in argv
    assert "--no-x-off" in argv and "--served-model-name m" in joined
    assert "--enable-per-request-metrics" in argv  # vLLM's metrics object in each answer
    assert "--tool-call-parser" not in argv and "--enable-auto-tool-choice" not in argv
    assert env["CUDA_VISIBLE_DEVICES"] == "2,5" and env["VLLM_SERVER_DEV_MODE"] == "1"
    assert "PYTHONPATH" not in env


def test_command_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    s = VllmServer(_spec(headroom=64 << 20, max_context=256), "cpu")
    try:
        argv, env = s.command([SimpleNamespace(index=0), SimpleNamespace(index=1)])
    finally:
        s.stop()
    joined = " ".join(argv)
    assert "--tensor-parallel-size 1" in joined and "--enforce-eager" in argv
    # vLLM refuses sleep mode on CPU; its /sleep and /wake_up answer in dev mode
    assert "--enable-sleep-mode" not in argv and "--kv-cache-memory-bytes" not in joined
    assert "--max-model-len 256" in joined
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    s = VllmServer(_spec(tool_call_parser="hermes"), "cpu")
    try:
        argv, env = s.command([SimpleNamespace(index=0)])
    finally:
        s.stop()
    assert "--enable-auto-tool-choice --tool-call-parser hermes" in " ".join(argv)
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"


def test_a_vllm_model_may_span_nodes() -> None:
    """procs: 2 with engine: vllm is one pipeline stage per node (engines/vllm/nodes.py)."""
    text = _pool("{name: a, path: /m, devices: 4, procs: 2, engine: vllm}")
    (m,) = load_pool_text(text, "p.yaml", check_paths=False).models
    assert (m.engine, m.devices, m.procs) == ("vllm", 4, 2)


def _flag(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_group_command_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The head: its server plus the group's flags; not eager and no VLLM_CPU_CI_ENV (a
    later stage needs the warm-up both skip); the follower: vLLM's headless node."""
    from acbslurm.serve.engines.vllm.nodes import HEADLESS, headless_argv

    monkeypatch.setenv("VLLM_CPU_CI_ENV", "1")
    s = VllmServer(_spec(devices=4, procs=2), "cpu")
    s.group = ("node-1", 29555, 0)
    try:
        argv, env = s.command([SimpleNamespace(index=i) for i in range(4)])
    finally:
        s.stop()
    assert argv[:3] == ["/v/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert _flag(argv, "--tensor-parallel-size") == "1"
    assert _flag(argv, "--pipeline-parallel-size") == "2" and _flag(argv, "--nnodes") == "2"
    assert _flag(argv, "--node-rank") == "0" and _flag(argv, "--master-addr") == "node-1"
    assert _flag(argv, "--master-port") == "29555"
    assert _flag(argv, "--compilation-config") == '{"mode": 2, "backend": "eager"}'
    assert "--enforce-eager" not in argv and "VLLM_CPU_CI_ENV" not in env
    follower = headless_argv(argv)
    assert follower[:3] == ["/v/bin/python", "-c", HEADLESS] and follower[-1] == "--headless"
    assert "--uds" not in follower and "--served-model-name" not in follower
    assert _flag(follower, "--model") == "/models/m" and "--max-num-seqs" in follower


def test_group_command_on_cuda() -> None:
    """On CUDA each stage is tensor parallel over its node's share of the gang."""
    s = VllmServer(_spec(devices=8, procs=2), "cuda")
    s.group = ("node-1", 29555, 0)
    try:
        argv, env = s.command([SimpleNamespace(index=i % 4) for i in range(8)])
    finally:
        s.stop()
    assert _flag(argv, "--tensor-parallel-size") == "4"
    assert _flag(argv, "--pipeline-parallel-size") == "2"
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3" and "--compilation-config" not in argv


def test_default_python(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACBSLURM_VLLM_PYTHON", raising=False)
    assert default_python().endswith("/.venv-vllm/bin/python")
    monkeypatch.setenv("ACBSLURM_VLLM_PYTHON", "/x/python")
    assert default_python() == "/x/python"


def test_engine_option_goes_with_demo(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from acbslurm.cli.main import cli

    pool = tmp_path / "p.yaml"
    pool.write_text(_pool("{name: a, path: /m}"))
    r = CliRunner().invoke(cli, ["serve", "--engine", "vllm", "--check", str(pool)])
    assert r.exit_code == 2 and "--engine goes with --demo" in r.output


def test_demo_pool_engine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import acbslurm.serve.modelmaker as mm

    fake = {"model-a": (tmp_path / "a", 4), "model-c": (tmp_path / "c", 8)}
    extra = {"model-embed": tmp_path / "e", "model-whisper": tmp_path / "w"}
    monkeypatch.setattr(mm, "demo_models", lambda root=None: fake)
    monkeypatch.setattr(mm, "demo_extra_models", lambda root=None: extra)
    text = mm.demo_pool_yaml(engine="vllm")
    # the chat models with a tool-call parser, and an embedding and a Whisper model
    assert text.count("engine: vllm") == 4 and text.count("tool_call_parser: hermes") == 2
    assert "engine_args: {runner: pooling, convert: embed}" in text
    models = load_pool_text(text, "demo", check_paths=False).models
    assert [m.name for m in models] == ["model-a", "model-c", "model-embed", "model-whisper"]
    assert "engine:" not in mm.demo_pool_yaml()
    assert "model-embed" not in mm.demo_pool_yaml()  # the built-in engine runs neither


def test_worker_module() -> None:
    from acbslurm.serve.supervisor import worker_module

    assert worker_module("vllm") == "acbslurm.serve.engines.vllm.worker"
    assert worker_module("builtin") == "acbslurm.serve.engines.builtin.worker"


def test_a_worker_whose_dead_servers_clean_up_hangs_still_exits(tmp_path: Path) -> None:
    """The server died and stopping what is left of it hangs (here: forever): the worker
    exits anyway, with the code the gateway restarts it on, once its clean-up time is
    up; it never lingers with a dead server behind it."""
    code = f"""
import threading, time
from types import SimpleNamespace
from acbslurm.serve.engines.vllm import worker as vllm
vllm.DEATH_CLEANUP_S = 0.5
server = SimpleNamespace(log_tail=lambda: "tail", stop=lambda: threading.Event().wait())
me = SimpleNamespace(spec=SimpleNamespace(name="m"), server=server)
open({str(tmp_path / "started")!r}, "w").close()
vllm.VllmWorker.server_died(me, -9)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (tmp_path / "started").exists(), r.stderr
    assert r.returncode == EXIT_THREAD, (r.returncode, r.stderr)
    assert "model m: vLLM exited (-9)" in r.stderr
