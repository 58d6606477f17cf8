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
from hypothesis import HealthCheck, settings
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

# Property tests check what holds, never how fast: speed is measured by bench/ scripts.
# Hypothesis' default 200 ms deadline per example (and its too-slow check on generating
# them) failed on a loaded 2-core machine (test_sreport_never_exceeds_window_or_run at
# load 20), so no example has a deadline here.
settings.register_profile("acbslurm", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("acbslurm")

# The processes the tests start are measured too, under --cov (processcoverage.py).
pytest_plugins = ["processcoverage"]


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


def _two_nodes_beside(suffix: str, offset: int, gpus: int, **kw: Any) -> Sandbox:
    """A 2-node sandbox beside the session's (its directory + ``-SUFFIX``, its ports +
    ``offset``), up, with no job running; ``kw`` for `up` (node_network)."""
    if os.geteuid() != 0:
        pytest.fail("integration tests need root: the sandbox starts Slurm, MariaDB and Docker")
    session = Sandbox(os.environ.get("ACBSLURM_SANDBOX_DIR") or None)
    sb = Sandbox(f"{session.layout.root}-{suffix}")
    log = lambda m: print(f"sandbox -{suffix}:", m)  # noqa: E731
    try:
        t0 = time.monotonic()
        port = default_port_base() + offset
        install, dock = requested_install(log), requested_docker(log)
        print(sb.up(gpus, port, log, install, TWO_NODES, docker_install=dock, **kw))
        print(f"sandbox -{suffix} up in {time.monotonic() - t0:.1f} s")
    except AcbslurmError as exc:
        pytest.fail(f"the 2-node sandbox -{suffix} could not start:\n{exc}", pytrace=False)
    sb.wait_idle()
    return sb


@pytest.fixture(scope="session")
def two() -> Iterator[Sandbox]:
    """A second sandbox of 2 nodes (two slurmd, 2 emulated GPUs each) beside the
    session's: its directory + ``-n2``, its ports + 5000. Brought up once per run for
    every test that asks for it (test_nodes_sandbox.py, test_serve_nodes.py), stopped
    at the end."""
    sb = _two_nodes_beside("n2", 5000, TWO_NODES_GPUS, node_network=False)
    yield sb
    sb.down()


@pytest.fixture(scope="session")
def net() -> Iterator[Sandbox]:
    """A 2-node sandbox whose nodes each have a network of their own (`up --nodes 2
    --node-network`: an address on a bridge, a Docker daemon of user1 per node), beside
    the session's: its directory + ``-net``, its ports + 5200, 1 GPU per node. Brought
    up once per run for the tests that ask for it (test_node_network_sandbox.py)."""
    sb = _two_nodes_beside("net", 5200, 1, node_network=True)
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
