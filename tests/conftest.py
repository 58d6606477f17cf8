"""The real sandbox for every integration and fault test: brought up once per run, or
reused.

These tests never skip: if the sandbox cannot start, the fixture fails and the error
names the component and the tail of its log.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sandboxtest import (
    TWO_NODES,
    TWO_NODES_GPUS,
    no_jobs,
    requested_docker,
    requested_install,
)

from acbslurm.errors import AcbslurmError
from acbslurm.sandbox import Sandbox
from acbslurm.sandbox.layout import default_port_base

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
        dock = requested_docker(log)
        port_base = int(port) if port else None
        print(sb.up(SANDBOX_GPUS, port_base, log, install=install, docker_install=dock))
    except AcbslurmError as exc:
        pytest.fail(f"the sandbox could not start:\n{exc}", pytrace=False)
    assert len(sb.gpus) == SANDBOX_GPUS, "integration tests expect a 2-GPU sandbox"
    yield sb


@pytest.fixture(scope="session")
def two() -> Iterator[Sandbox]:
    """A second sandbox of 2 nodes (two slurmd, 2 emulated GPUs each) beside the
    session's: its directory + ``-n2``, its ports + 5000. Brought up once per run for
    every test that asks for it (test_nodes_sandbox.py, test_serve_nodes.py), stopped
    at the end."""
    if os.geteuid() != 0:
        pytest.fail("integration tests need root: the sandbox starts Slurm, MariaDB and Docker")
    session = Sandbox(os.environ.get("ACBSLURM_SANDBOX_DIR") or None)
    sb = Sandbox(f"{session.layout.root}-n2")
    log = lambda m: print("sandbox -n2:", m)  # noqa: E731
    try:
        t0 = time.monotonic()
        port = default_port_base() + 5000
        install, dock = requested_install(log), requested_docker(log)
        print(sb.up(TWO_NODES_GPUS, port, log, install, TWO_NODES, docker_install=dock))
        print(f"sandbox -n2 up in {time.monotonic() - t0:.1f} s")
    except AcbslurmError as exc:
        pytest.fail(f"the 2-node sandbox could not start:\n{exc}", pytrace=False)
    sb.wait_idle()
    yield sb
    sb.down()


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
