"""The real sandbox for every integration test: brought up once per run, or reused.

Integration tests never skip: if the sandbox cannot start, the fixture fails and the
error names the component and the tail of its log.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from acbslurm.errors import AcbslurmError
from acbslurm.sandbox import Sandbox

SANDBOX_GPUS = 2


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration" in str(item.path):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def sandbox() -> Iterator[Sandbox]:
    sb = Sandbox(os.environ.get("ACBSLURM_SANDBOX_DIR") or None)
    if os.geteuid() != 0:
        pytest.fail("integration tests need root: the sandbox starts Slurm, MariaDB and Docker")
    try:
        print(sb.up(SANDBOX_GPUS, progress=lambda m: print("sandbox:", m)))
    except AcbslurmError as exc:
        pytest.fail(f"the sandbox could not start:\n{exc}", pytrace=False)
    assert len(sb.gpus) == SANDBOX_GPUS, "integration tests expect a 2-GPU sandbox"
    yield sb


@pytest.fixture
def idle_sandbox(sandbox: Sandbox) -> Sandbox:
    """The sandbox with no job left over from an earlier test."""
    sandbox.wait_idle(timeout=60)
    return sandbox
