"""A job's broker keeps who held its GPUs for how long (device-seconds per client name)
beside its socket, for the epilog (usagebook.BROKER_USAGE); the core counts each lease
from its grant to its release or its holder's end."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from acbslurm.broker import core
from acbslurm.broker.client import BrokerClient
from acbslurm.serve.brokerhost import BrokerThread
from acbslurm.usagebook import BROKER_USAGE, client_name, read_broker_usage


def test_the_core_counts_each_lease_to_its_holders_name() -> None:
    b = core.Broker([core.Device("g0"), core.Device("g1")])
    a = b.register("agarun:train.py", 1)
    c = b.register("agarun:eval.py", 2)
    (grant,) = [e for e in b.request(a, 1, 2, now=10.0) if isinstance(e, core.Granted)]
    b.request(c, 1, 1, now=11.0)
    b.release(a, grant.lease_id, now=13.0)  # 2 devices x 3 s
    assert b.held == {"agarun:train.py": 6.0}
    assert b.held_until(15.0) == {"agarun:train.py": 6.0, "agarun:eval.py": 2.0}
    b.disconnect(c, now=16.0)  # its lease ends with it
    assert b.held == {"agarun:train.py": 6.0, "agarun:eval.py": 3.0}


def test_a_job_broker_writes_the_usage_beside_its_socket(tmp_path: Path) -> None:
    broker = BrokerThread(
        [core.Device("cpu0"), core.Device("cpu1")], "fifo", 1.0, "test",
        address=f"unix:{tmp_path / 'broker.sock'}",
    )  # fmt: skip
    broker.start()
    try:
        with BrokerClient(broker.address, name="agarun: my run") as client:
            lease = client.acquire(2)
            time.sleep(0.3)
            client.release(lease)
    finally:
        broker.stop()
    totals = read_broker_usage(str(tmp_path), os.getuid())
    assert totals is not None
    (name,) = [n for n, _ in totals.use]
    assert name == "agarun:_my_run"
    assert 0.6 <= totals.leased_total < 5, totals.leased
    assert os.stat(tmp_path / BROKER_USAGE).st_mode & 0o777 == 0o600


@pytest.mark.parametrize(
    ("raw", "safe"), [("serve:model-a", "serve:model-a"), ("", "-"), ("_x y", "x_x_y")]
)
def test_client_names_become_usage_names(raw: str, safe: str) -> None:
    assert client_name(raw) == safe
