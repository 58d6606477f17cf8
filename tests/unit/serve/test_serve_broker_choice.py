"""Which broker a pool uses: the job's inside Slurm, an explicit one, or its own."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from acbslurm.broker.devices import cpu_devices
from acbslurm.jobsockets import job_socket_path
from acbslurm.serve.brokerhost import BrokerThread
from acbslurm.serve.pool import PoolSpec, load_pool_text
from acbslurm.serve.runner import choose_broker


def _pool(path: Path, extra: str = "") -> PoolSpec:
    return load_pool_text(
        f"{extra}models:\n  - {{name: a, path: {path}, devices: 3}}\n"
        f"  - {{name: b, path: {path}}}\n",
        "p.yaml",
    )


def test_inside_a_job_the_jobs_broker_is_used(tiny_models: dict[str, Path]) -> None:
    job = f"servetest{os.getpid()}"
    address = f"unix:{job_socket_path(job)}"
    broker = BrokerThread(cpu_devices("cpu:4:1M"), "fifo", 1.0, "job", address=address)
    broker.start()
    try:
        choice = choose_broker(_pool(tiny_models["model-a"]), env={"SLURM_JOB_ID": job})
        assert choice.address == address and choice.own is None and choice.device_kind == "cpu"
        assert [d.id for d in choice.devices] == ["cpu0", "cpu1", "cpu2", "cpu3"]
        assert all(d.memory_total == 1 << 20 for d in choice.devices)
    finally:
        broker.stop()
        Path(job_socket_path(job)).unlink(missing_ok=True)


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
