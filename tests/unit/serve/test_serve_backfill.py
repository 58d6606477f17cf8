"""Backfill in a real pool (the write-up's 4 + 4 + 8 on 8 CPU stand-in devices), driven
by the official ``openai`` client: while model-c (8 devices) waits for model-a's 4,
model-b gets the 4 free ones rather than wait behind model-c, and model-c still goes
before model-a's next turn.

The devices are large enough for every model at once, so no turn evicts another's
weights; the order is read from the pool broker's own record of its leases, not from
timings.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from servehelp import long_request_in_flight, openai_client

from acbslurm.serve.brokerhost import LeaseRecord, overlaps
from acbslurm.serve.pool import load_pool_text
from acbslurm.serve.runner import PoolServer


@pytest.fixture(scope="module")
def server(tiny_models: dict[str, Path]) -> Iterator[PoolServer]:
    models = "\n".join(
        f"  - {{name: {m}, path: {tiny_models[m]}, devices: {n}, temperature: 0, "
        "headroom: 32K, max_tokens: 4}"
        for m, n in (("model-a", 4), ("model-b", 4), ("model-c", 8))
    )
    head = "listen: 127.0.0.1:0\ndevices: cpu:8:64M\npolicy: quantum\nquantum: 0.2\n"
    text = f"{head}models:\n{models}\n"
    # 20 ms a token: model-a's 450-token answer holds its lease for 9 s and more.
    srv = PoolServer(
        load_pool_text(text, "backfill.yaml"), env={"ACBSLURM_SERVE_TOKEN_DELAY": "0.02"}
    )
    srv.start(ready_timeout=240)
    yield srv
    srv.stop()


@pytest.fixture
def client(server: PoolServer) -> openai.OpenAI:
    return openai_client(server, timeout=120)


def waiting(server: PoolServer) -> list[str]:
    """The clients of the broker's queue, in order (``serve:MODEL``)."""
    assert server.broker is not None
    b = server.broker.broker
    return list(server.broker.call(lambda: [b.clients[w.client].name for w in b.queue]))


def yield_asked(server: PoolServer, model: str) -> bool:
    assert server.broker is not None
    b = server.broker.broker

    def asked() -> bool:
        mine = [c for c in b.clients.values() if c.name == f"serve:{model}"]
        return any(lease.yield_asked for c in mine for lease in c.leases.values())

    return bool(server.broker.call(asked))


def leases(server: PoolServer, model: str, since: int) -> list[LeaseRecord]:
    assert server.broker is not None
    return [r for r in server.broker.snapshot()["record"][since:] if r.client == f"serve:{model}"]


def test_a_model_that_fits_is_served_while_a_bigger_one_waits(
    server: PoolServer, client: openai.OpenAI
) -> None:
    assert server.broker is not None
    for m in ("model-a", "model-b", "model-c"):  # every model's weights resident
        client.completions.create(model=m, prompt="warm", max_tokens=1)
    start = len(server.broker.snapshot()["record"])
    a_thread, a_outcome = long_request_in_flight(
        client, "model-a", server.gateway.handles["model-a"]
    )
    answers: dict[str, Any] = {}

    def ask(model: str) -> None:
        answers[model] = client.completions.create(model=model, prompt="Hello", max_tokens=3)

    c_thread = threading.Thread(target=ask, args=("model-c",))
    c_thread.start()
    deadline = time.monotonic() + 30
    while waiting(server) != ["serve:model-c"]:
        assert time.monotonic() < deadline, f"model-c is not waiting: {waiting(server)}"
        time.sleep(0.01)
    ask("model-b")  # returns once answered
    # model-a, asked to yield (model-c has waited past the quantum), takes no newcomer
    # into its turn: asked again, it waits for a next turn, which comes after model-c's.
    deadline = time.monotonic() + 30
    while not yield_asked(server, "model-a"):
        assert time.monotonic() < deadline, "model-a was not asked to yield"
        time.sleep(0.01)
    ask_a_again = threading.Thread(target=ask, args=("model-a",))
    ask_a_again.start()
    for t in (a_thread, c_thread, ask_a_again):
        t.join(120)
    assert a_outcome == ["answered"] and set(answers) == {"model-a", "model-b", "model-c"}

    [a_long, a_next] = leases(server, "model-a", start)
    [b] = leases(server, "model-b", start)
    [c] = leases(server, "model-c", start)
    # model-b's turn came and went inside model-a's long one, on the other 4 devices.
    assert a_long.granted < b.granted and b.ended < a_long.ended, (a_long, b)
    assert not set(b.devices) & set(a_long.devices)
    # model-c went once both were done, and before model-a's next turn.
    assert c.granted >= max(a_long.ended, b.ended) and a_next.granted >= c.ended, (c, a_next)
    snap = server.broker.snapshot()
    assert overlaps(snap["record"]) == [] and snap["violations"] == []
    assert snap["backfills"] >= 1
