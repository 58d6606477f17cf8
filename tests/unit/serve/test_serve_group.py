"""A model split over a worker group (``procs: 2``): two processes, two pipeline stages
over torch.distributed (gloo), one gang lease held by the leader.

One pool for the module on 4 CPU stand-ins of 320 KiB: model C served whole (c1) and
split in two processes (c2), plus model A, so that every turn evicts the others'
weights. The fault tests (a follower killed, a follower hung) run last.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from servehelp import _get, _metric, long_request_in_flight, openai_client, reference

from acbslurm.serve.brokerhost import overlaps
from acbslurm.serve.pool import load_pool_text
from acbslurm.serve.runner import PoolServer
from acbslurm.serve.supervisor import WorkerHandle

PROMPTS = ("The broker lends GPUs", "Hello, world!", "What is a GPU?", "Retrieval augmented")
STAGE_TIMEOUT = 4.0  # seconds: a hung follower is declared broken after this


@pytest.fixture(scope="module")
def server(tiny_models: dict[str, Path]) -> Iterator[PoolServer]:
    c = tiny_models["model-c"]
    text = f"""\
listen: 127.0.0.1:0
devices: cpu:4:320K
policy: quantum
quantum: 0.2
request_timeout: 60
models:
  - {{name: c1, path: {c}, devices: 4, temperature: 0, headroom: 32K, max_tokens: 8}}
  - {{name: c2, path: {c}, devices: 4, procs: 2, temperature: 0, headroom: 32K, max_tokens: 8}}
  - {{name: a, path: {tiny_models["model-a"]}, devices: 4, temperature: 0, headroom: 32K,
      max_tokens: 8}}
"""
    env = {
        "ACBSLURM_SERVE_TOKEN_DELAY": "0.002",
        "ACBSLURM_SERVE_STAGE_TIMEOUT": str(STAGE_TIMEOUT),
    }
    srv = PoolServer(load_pool_text(text, "group-pool.yaml"), env=env)
    srv.start(ready_timeout=240)
    yield srv
    srv.stop()


@pytest.fixture
def client(server: PoolServer) -> openai.OpenAI:
    return openai_client(server)


def group(server: PoolServer) -> WorkerHandle:
    return server.gateway.handles["c2"]


def test_two_processes_serve_one_model(server: PoolServer, tiny_models: dict[str, Path]) -> None:
    h = group(server)
    assert h.state == "ready" and h.proc is not None and len(h.followers) == 1
    follower = h.followers[0]
    assert follower.returncode is None and follower.pid != h.proc.pid
    cmdline = Path(f"/proc/{follower.pid}/cmdline").read_bytes().split(b"\0")
    assert b"acbslurm.serve.engines.builtin.follower" in cmdline and b"--rank" in cmdline
    assert not server.gateway.handles["c1"].followers
    # The leader reports both stages' weights: the whole model's, plus the token
    # embedding a second time (GPT-2's head is tied to it, so the last stage keeps it).
    cfg = json.loads((tiny_models["model-c"] / "config.json").read_text())
    tied = cfg["vocab_size"] * cfg["n_embd"] * 4
    assert h.weights_bytes == server.gateway.handles["c1"].weights_bytes + tied


def test_outputs_equal_the_model_in_one_process(
    server: PoolServer, client: openai.OpenAI, tiny_models: dict[str, Path]
) -> None:
    """Greedy decoding of C in two processes = C in one process = C alone, for several
    prompts, streaming and not, with A's and C's turns evicting each other between."""
    for prompt in PROMPTS:
        alone = reference(tiny_models["model-c"], prompt, 12)
        whole = client.completions.create(model="c1", prompt=prompt, max_tokens=12)
        client.completions.create(model="a", prompt=prompt, max_tokens=2)  # evicts C's
        split = client.completions.create(model="c2", prompt=prompt, max_tokens=12)
        streamed = client.completions.create(model="c2", prompt=prompt, max_tokens=12, stream=True)
        assert whole.choices[0].text == alone
        assert split.choices[0].text == alone, prompt
        assert "".join(c.choices[0].text for c in streamed if c.choices) == alone
        assert split.usage is not None and split.usage.completion_tokens == 12
    chat = {
        m: client.chat.completions.create(
            model=m, messages=[{"role": "user", "content": "hi"}], max_tokens=10
        )
        .choices[0]
        .message.content
        for m in ("c1", "c2")
    }
    assert chat["c1"] == chat["c2"]


def test_concurrent_requests_share_turns_and_the_gang_moves_as_one(
    server: PoolServer, client: openai.OpenAI, tiny_models: dict[str, Path]
) -> None:
    expected = {p: reference(tiny_models["model-c"], p, 8) for p in PROMPTS}
    results: list[tuple[str, str, str]] = []
    errors: list[BaseException] = []

    def user(k: int) -> None:
        try:
            for i in range(4):
                model = ("c2", "a", "c1")[(k + i) % 3]
                prompt = PROMPTS[(k * 3 + i) % len(PROMPTS)]
                r = client.completions.create(model=model, prompt=prompt, max_tokens=8)
                results.append((model, prompt, r.choices[0].text))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=user, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert len(results) == 24
    for model, prompt, text in results:
        if model != "a":
            assert text == expected[prompt], (model, prompt)
    assert server.broker is not None
    snap = server.broker.snapshot()
    assert snap["violations"] == [] and overlaps(snap["record"]) == []
    leases = [r for r in snap["record"] if r.client == "serve:c2"]
    assert leases and all(len(r.devices) == 4 for r in leases)  # one lease, the whole gang
    assert "serve:c2" in snap["clients"].values()
    assert not any("c2" in n and n != "serve:c2" for n in snap["clients"].values())
    _, metrics = _get(server, "/metrics")
    assert _metric(metrics, "acbslurm_serve_swaps_out_total", "c2") > 0  # evicted ...
    assert _metric(metrics, "acbslurm_serve_swaps_in_total", "c2") > 1  # ... and restored


def _broken_follower_gets_503_and_the_group_restarts(
    server: PoolServer, client: openai.OpenAI, hurt: Any
) -> float:
    """Start a long request on c2, ``hurt(follower_pid)`` mid-decoding: the request
    fails with 503 (seconds it took returned), a new group serves again, no leaked
    broker session or lease."""
    h = group(server)
    assert h.proc is not None and h.followers
    leader, follower = h.proc.pid, h.followers[0].pid
    restarts = h.restarts
    t, outcome = long_request_in_flight(client, "c2", h)
    hurt_at = time.monotonic()
    hurt(follower)
    t.join(60)
    took = time.monotonic() - hurt_at
    assert len(outcome) == 1 and isinstance(outcome[0], openai.APIStatusError), outcome
    assert outcome[0].status_code == 503
    deadline = time.monotonic() + 180
    while (h.state != "ready" or h.restarts == restarts) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert h.state == "ready" and h.restarts == restarts + 1
    assert h.proc is not None and h.proc.pid != leader
    assert len(h.followers) == 1 and h.followers[0].pid != follower
    for pid in (leader, follower):  # the old group is gone
        assert not Path(f"/proc/{pid}").exists() or _zombie(pid)
    r = client.completions.create(model="c2", prompt="Hello", max_tokens=3)
    assert r.usage is not None and r.usage.completion_tokens == 3
    assert server.broker is not None
    snap = server.broker.snapshot()
    assert overlaps(snap["record"]) == [] and snap["violations"] == []
    assert sorted(snap["clients"].values()) == ["serve:a", "serve:c1", "serve:c2"]
    return took


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except OSError:
        return True


def test_follower_killed_mid_batch(server: PoolServer, client: openai.OpenAI) -> None:
    _broken_follower_gets_503_and_the_group_restarts(
        server, client, lambda pid: os.kill(pid, signal.SIGKILL)
    )


def test_follower_hung_mid_batch_is_not_a_hang(server: PoolServer, client: openai.OpenAI) -> None:
    """A stopped follower never answers: the leader's watchdog fails the group after
    ACBSLURM_SERVE_STAGE_TIMEOUT, long before the request's own timeout (60 s)."""
    took = _broken_follower_gets_503_and_the_group_restarts(
        server, client, lambda pid: os.kill(pid, signal.SIGSTOP)
    )
    assert took < STAGE_TIMEOUT + 15


def test_stages_compute_the_same_logits_as_the_whole_model(tiny_models: dict[str, Path]) -> None:
    """In one process, without the network: stage 0 then stage 1 give bit-identical
    logits to the whole model at every step (prompt, then 15 tokens)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from acbslurm.serve.engines.builtin.stages import make_stage, split

    path = tiny_models["model-c"]

    def load() -> Any:
        return AutoModelForCausalLM.from_pretrained(path).eval()

    whole = load()
    s0, s1 = make_stage(load(), 0, 2), make_stage(load(), 1, 2)
    assert (s0.blocks, s1.blocks) == (1, 2) == (split(3, 2, 0)[1], split(3, 2, 1)[1] - 1)
    ids = torch.tensor([AutoTokenizer.from_pretrained(path)("What is a GPU?").input_ids])
    past = p0 = p1 = None
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # transformers renames past_key_values
        for _ in range(16):
            out = whole(input_ids=ids, past_key_values=past, use_cache=True)
            past = out.past_key_values
            hidden, p0 = s0.forward(ids, p0)
            logits, p1 = s1.forward(hidden, p1)
            assert torch.equal(out.logits[0, -1], logits)
            ids = torch.tensor([[int(torch.multinomial(torch.softmax(logits, -1), 1))]])


def test_placement_local_and_slurm() -> None:
    from acbslurm.serve.placement import Placement, from_env

    assert from_env({}) == Placement()
    local = Placement().follower_argv(1, "{}", "127.0.0.1:5000", "cpu", python="py")
    assert local[:3] == ["py", "-m", "acbslurm.serve.engines.builtin.follower"]
    assert local[local.index("--rendezvous") + 1] == "127.0.0.1:5000"
    one_node = {"SLURM_JOB_NUM_NODES": "1", "SLURM_JOB_NODELIST": "n1"}
    assert from_env(one_node) == Placement()
    job = {
        "SLURM_JOB_NUM_NODES": "3",
        "SLURM_JOB_NODELIST": "gpu[1-3]",
        "SLURMD_NODENAME": "gpu2",
    }
    p = from_env(job)
    assert p.nodes == ("gpu2", "gpu3", "gpu1") and p.host == "gpu2"
    assert p.node_of(0) is None and p.node_of(1) == "gpu3" and p.node_of(2) == "gpu1"
    assert p.node_of(3) is None  # wraps round to this node: a local process
    argv = p.follower_argv(1, '{"name": "c"}', "gpu2:5000", "cuda", python="py")
    assert argv[: argv.index("py")] == [
        "srun",
        "--nodes=1",
        "--ntasks=1",
        "--nodelist=gpu3",
        "--overlap",
        "--kill-on-bad-exit=1",
        "--quiet",
    ]
    assert argv[argv.index("--spec") + 1] == '{"name": "c"}'  # one argument, never a shell
    assert from_env({**job, "ACBSLURM_SERVE_RENDEZVOUS_HOST": "10.0.0.2"}).host == "10.0.0.2"


def test_in_a_multi_node_job_followers_go_through_srun(
    tiny_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside a 2-node job the gateway starts the follower with srun on the other
    node; where srun cannot be run (here: not on the workers' PATH) the model is
    refused with the reason, not restarted forever, and its leader leaves no lease."""
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "2")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "node[1-2]")
    monkeypatch.setenv("SLURMD_NODENAME", "node1")
    monkeypatch.setenv("ACBSLURM_SERVE_RENDEZVOUS_HOST", "127.0.0.1")
    text = (
        "listen: 127.0.0.1:0\ndevices: cpu:2\nmodels:\n"
        f"  - {{name: c, path: {tiny_models['model-c']}, devices: 2, procs: 2}}\n"
    )
    srv = PoolServer(load_pool_text(text, "job-pool.yaml"), env={"PATH": "/nonexistent"})
    try:
        srv.start(ready_timeout=120)
        h = srv.gateway.handles["c"]
        assert h.placement.node_of(1) == "node2"
        assert h.state == "refused" and h.restarts == 0
        assert h.reason.startswith("cannot start follower 1 (srun):"), h.reason
        status, body = _get(srv, "/health")
        assert status == 503 and "cannot start follower 1 (srun)" in body
        assert srv.broker is not None
        deadline = time.monotonic() + 10  # the leader's session ends with its process
        while srv.broker.snapshot()["clients"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert srv.broker.snapshot()["clients"] == {}
    finally:
        srv.stop()
