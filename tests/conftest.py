"""The real sandbox for every integration and fault test: brought up once per run, or
reused.

These tests never skip: if the sandbox cannot start, the fixture fails and the error
names the component and the tail of its log.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sandboxtest import no_jobs, requested_install

from acbslurm.errors import AcbslurmError
from acbslurm.sandbox import Sandbox

SANDBOX_GPUS = 2


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration" in str(item.path) or "tests/faults" in str(item.path):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def sandbox() -> Iterator[Sandbox]:
    """The sandbox at ACBSLURM_SANDBOX_DIR (default /var/lib/acbslurm/sandbox), on port
    base ACBSLURM_SANDBOX_PORT_BASE, running the Slurm of ACBSLURM_SANDBOX_SLURM
    (`make test SLURM=25.11.7`) or ACBSLURM_SANDBOX_SLURM_PREFIX (default: Debian's)."""
    sb = Sandbox(os.environ.get("ACBSLURM_SANDBOX_DIR") or None)
    if os.geteuid() != 0:
        pytest.fail("integration tests need root: the sandbox starts Slurm, MariaDB and Docker")
    port = os.environ.get("ACBSLURM_SANDBOX_PORT_BASE", "")
    log = lambda m: print("sandbox:", m)  # noqa: E731
    try:
        install = requested_install(log)
        print(sb.up(SANDBOX_GPUS, int(port) if port else None, progress=log, install=install))
    except AcbslurmError as exc:
        pytest.fail(f"the sandbox could not start:\n{exc}", pytrace=False)
    assert len(sb.gpus) == SANDBOX_GPUS, "integration tests expect a 2-GPU sandbox"
    yield sb


@pytest.fixture
def idle_sandbox(sandbox: Sandbox) -> Sandbox:
    """The sandbox with no job left over from an earlier test."""
    sandbox.wait_idle(timeout=60)
    return sandbox


@pytest.fixture(scope="module")
def sb(sandbox: Any) -> Any:
    """The session sandbox (conftest.py): never skipped, it fails when it cannot start."""
    return sandbox


@pytest.fixture
def idle(sb: Any) -> Iterator[Any]:
    no_jobs(sb)
    yield sb
    no_jobs(sb)


@pytest.fixture(scope="module")
def scripts() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="acbslurm-hooks-") as d:
        os.chmod(d, 0o777)  # the job user writes its output here
        yield Path(d)
