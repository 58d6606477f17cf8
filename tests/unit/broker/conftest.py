"""Fixtures for the broker tests."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from brokertest_util import Daemon, start_broker


@pytest.fixture
def broker_factory() -> Iterator[object]:
    started: list[Daemon] = []

    def factory(*args: str, sock: Path | None = None) -> Daemon:
        d = start_broker(*args, sock=sock)
        started.append(d)
        return d

    yield factory
    for d in started:
        d.stop()
