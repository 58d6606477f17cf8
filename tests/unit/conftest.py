"""Fixtures every unit test may use: a fake Docker daemon on a unix socket and fake
Slurm commands on PATH (each lives in its own module beside this file)."""

import os
from collections.abc import Iterator

import pytest
from fake_docker import fake_docker  # noqa: F401
from fake_slurm import fake_slurm  # noqa: F401

# What points a process at a live cluster, a Docker daemon or settings: `acbslurm sandbox
# env` exported in the shell must not send unit tests' jobs to a real sandbox.
LIVE = ("SLURM_CONF", "DOCKER_HOST", "SLURM_JOB_ID", "ACBSLURM_GPU_UUIDS")
# The tests' own switch (test_render.py: regenerate the golden files), not a setting.
KEPT = ("ACBSLURM_UPDATE_GOLDEN", "ACBSLURM_SCREENSHOTS")


@pytest.fixture(autouse=True)
def no_live_cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for key in list(os.environ):
        if key in LIVE or (key.startswith("ACBSLURM_") and key not in KEPT):
            monkeypatch.delenv(key)
    yield
