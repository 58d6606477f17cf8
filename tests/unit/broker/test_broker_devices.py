"""Device sources: CPU stand-ins, Slurm job GPUs, sizes and addresses."""

import pytest

from acbslurm.broker.address import default_address, parse_address
from acbslurm.broker.devices import cpu_devices, resolve_devices, slurm_job_gpus
from acbslurm.errors import ConfigError, GpuMappingError
from acbslurm.gpu.inventory import GpuInfo, write_static
from acbslurm.units import size_bytes

INV = [
    GpuInfo(index=i, minor=3 - i, uuid=f"GPU-{i}", name="H200", memory_total=10) for i in range(4)
]


@pytest.mark.parametrize(
    ("text", "n"),
    [("20G", 20 * 1024**3), ("512MiB", 512 * 1024**2), ("1GB", 1024**3), ("1.5k", 1536), ("7", 7)],
)
def test_parse_size(text: str, n: int) -> None:
    assert size_bytes(text) == n


def test_parse_size_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="'lots'"):
        size_bytes("lots")


def test_cpu_devices() -> None:
    devs = cpu_devices("cpu:2:1G")
    assert [d.id for d in devs] == ["cpu0", "cpu1"] and devs[0].memory_total == 1024**3
    with pytest.raises(ConfigError, match="need at least one"):
        cpu_devices("cpu:0")


def test_slurm_job_prefers_the_task_prolog_uuids() -> None:
    env = {"SLURM_JOB_ID": "5", "ACBSLURM_GPU_UUIDS": "GPU-2,GPU-0", "SLURM_JOB_GPUS": "0"}
    assert [g.uuid for g in slurm_job_gpus(env, INV)] == ["GPU-2", "GPU-0"]


def test_slurm_job_gpus_map_minor_numbers_through_the_inventory() -> None:
    env = {"SLURM_JOB_ID": "5", "SLURM_JOB_GPUS": "0,2"}
    assert [g.uuid for g in slurm_job_gpus(env, INV)] == ["GPU-3", "GPU-1"]


def test_slurm_job_gpus_errors() -> None:
    with pytest.raises(GpuMappingError, match="no GPUs"):
        slurm_job_gpus({"SLURM_JOB_ID": "5"}, INV)
    with pytest.raises(GpuMappingError, match="'9'"):
        slurm_job_gpus({"SLURM_JOB_ID": "5", "SLURM_JOB_GPUS": "9"}, INV)


def test_inside_a_job_auto_manages_exactly_the_jobs_gpus(tmp_path) -> None:
    inv = tmp_path / "gpus.json"
    write_static(inv, INV)
    env = {"SLURM_JOB_ID": "42", "CUDA_VISIBLE_DEVICES": "1"}
    found = resolve_devices("auto", env, str(inv))
    assert [d.id for d in found.devices] == ["GPU-1"] and "42" in found.source
    outside = resolve_devices("auto", {}, str(inv))
    assert [d.id for d in outside.devices] == ["GPU-0", "GPU-1", "GPU-2", "GPU-3"]


def test_addresses() -> None:
    assert parse_address("unix:///run/b.sock") == "unix:/run/b.sock"
    assert parse_address("127.0.0.1:5000") == "127.0.0.1:5000"
    for bad in ("unix:b.sock", "host", "host:99999"):
        with pytest.raises(ConfigError):
            parse_address(bad)
    assert default_address({"SLURM_JOB_ID": "9"}) == "unix:/run/acbslurm/job/9/broker.sock"
    assert default_address({"ACBSLURM_BROKER_ADDRESS": "h:1", "SLURM_JOB_ID": "9"}) == "h:1"
