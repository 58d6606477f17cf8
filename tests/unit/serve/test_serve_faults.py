"""Faults around the broker: the pool uses a broker it did not start, which restarts."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from acbslurm.broker.devices import cpu_devices
from acbslurm.serve.brokerhost import BrokerThread
from acbslurm.serve.pool import load_pool_text
from acbslurm.serve.runner import PoolServer


@pytest.fixture
def broker_address(tmp_path: Path) -> Iterator[str]:
    yield f"unix:{tmp_path / 'broker.sock'}"


def test_broker_restart_gives_503_then_recovers(
    broker_address: str, tiny_models: dict[str, Path]
) -> None:
    first = BrokerThread(cpu_devices("cpu:2"), "fifo", 1.0, "test", address=broker_address)
    first.start()
    pool = load_pool_text(
        f"listen: 127.0.0.1:0\nbroker: {broker_address}\nrequest_timeout: 30\n"
        f"models:\n  - {{name: a, path: {tiny_models['model-a']}, temperature: 0}}\n",
        "p.yaml",
    )
    srv = PoolServer(pool)
    assert srv.choice.address == broker_address and srv.choice.device_kind == "cpu"
    second = None
    try:
        srv.start(ready_timeout=180)
        assert srv.broker is None  # not ours
        c = openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key="x", max_retries=0)
        assert c.completions.create(model="a", prompt="hi", max_tokens=2).usage is not None
        first.stop()
        with pytest.raises(openai.InternalServerError) as err:
            c.completions.create(model="a", prompt="hi", max_tokens=2)
        assert err.value.status_code == 503
        assert err.value.response.headers.get("Retry-After")
        second = BrokerThread(cpu_devices("cpu:2"), "fifo", 1.0, "test", address=broker_address)
        second.start()
        handle = srv.gateway.handles["a"]
        deadline = time.monotonic() + 150
        while (handle.state != "ready" or not handle.restarts) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert handle.state == "ready" and handle.restarts >= 1
        r = c.completions.create(model="a", prompt="hi", max_tokens=2)
        assert r.usage is not None and r.usage.completion_tokens == 2
        # The answer can overtake the worker's release (it is sent while decoding).
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            snap = second.snapshot()
            if all(rec.ended for rec in snap["record"]):
                break
            time.sleep(0.05)
        assert list(snap["clients"].values()) == ["serve:a"]  # one session, no leaked leases
        assert all(rec.ended for rec in snap["record"])
    finally:
        srv.stop()
        if second is not None:
            second.stop()
