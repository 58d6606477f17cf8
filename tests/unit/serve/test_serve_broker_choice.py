"""Which broker a pool uses: the job's inside Slurm, an explicit one, or its own."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from acbslurm.broker.devices import cpu_devices
from acbslurm.jobsockets import job_dir, job_socket_path
from acbslurm.serve.brokerhost import BrokerThread
from acbslurm.serve.pool import PoolSpec, load_pool_text
from acbslurm.serve.runner import choose_broker


def _pool(path: Path, extra: str = "") -> PoolSpec:
    return load_pool_text(
        f"{extra}models:\n  - {{name: a, path: {path}, devices: 3}}\n"
        f"  - {{name: b, path: {path}}}\n",
        "p.yaml",
    )


def test_inside_a_job_the_jobs_broker_is_used(
    tiny_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    job = str(os.getpid())
    # A short base: a unix socket path has at most 107 bytes.
    with tempfile.TemporaryDirectory(prefix="acbserve") as base:
        monkeypatch.setenv("ACBSLURM_JOB_RUNTIME_DIR", base)
        os.mkdir(job_dir(job, base), 0o700)  # the prolog's part
        address = f"unix:{job_socket_path(job, base)}"
        broker = BrokerThread(cpu_devices("cpu:4:1M"), "fifo", 1.0, "job", address=address)
        broker.start()
        try:
            choice = choose_broker(_pool(tiny_models["model-a"]), env={"SLURM_JOB_ID": job})
            assert choice.address == address and choice.own is None
            assert choice.device_kind == "cpu"
            assert [d.id for d in choice.devices] == ["cpu0", "cpu1", "cpu2", "cpu3"]
            assert all(d.memory_total == 1 << 20 for d in choice.devices)
        finally:
            broker.stop()


def test_inside_a_job_without_its_broker_the_pool_starts_its_own(
    tiny_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ACBSLURM_JOB_RUNTIME_DIR", str(tmp_path))
    pool = _pool(tiny_models["model-a"], "devices: cpu:8:2M\n")
    choice = choose_broker(pool, env={"SLURM_JOB_ID": "12"})
    assert choice.address == "" and choice.own is None and len(choice.devices) == 8


def test_own_broker_on_stand_ins_and_fallback_without_gpu(tiny_models: dict[str, Path]) -> None:
    path = tiny_models["model-a"]
    choice = choose_broker(_pool(path, "devices: cpu:8:2M\n"), env={})
    assert choice.address == "" and len(choice.devices) == 8 and choice.device_kind == "cpu"
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        pytest.skip("this machine has NVML: auto finds GPUs")
    except Exception:
        pass
    choice = choose_broker(_pool(path), env={})
    # No GPU: one unsized stand-in per device of the largest gang.
    assert [d.id for d in choice.devices] == [
        "cpu0",
        "cpu1",
        "cpu2",
    ] and choice.device_kind == "cpu"


def test_inside_a_job_the_pools_own_broker_listens_as_the_jobs_broker(
    tiny_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """So that `acbslurm broker status` and `agarun` in the job find the pool's broker."""
    job = str(os.getpid() + 1)
    with tempfile.TemporaryDirectory(prefix="acbserve") as base:
        monkeypatch.setenv("ACBSLURM_JOB_RUNTIME_DIR", base)
        pool = _pool(tiny_models["model-a"], "devices: cpu:4:2M\n")
        # no job folder (no acbslurm prolog, no XDG_RUNTIME_DIR): a private socket
        assert choose_broker(pool, env={"SLURM_JOB_ID": job}).own_address == ""
        os.mkdir(job_dir(job, base), 0o700)  # the prolog's part
        choice = choose_broker(pool, env={"SLURM_JOB_ID": job})
        assert choice.address == "" and choice.own is None
        assert choice.own_address == f"unix:{job_socket_path(job, base)}"
        # outside a job, or with an explicit address, never
        assert choose_broker(pool, env={}).own_address == ""
