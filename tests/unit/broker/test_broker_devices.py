"""Device sources: CPU stand-ins, Slurm job GPUs, sizes and addresses."""

from pathlib import Path

import pytest

from acbslurm.broker.address import default_address, parse_address
from acbslurm.broker.devices import cpu_devices, resolve_devices, slurm_job_gpus
from acbslurm.config import Settings
from acbslurm.errors import ConfigError, GpuMappingError
from acbslurm.gpu.inventory import GpuInfo, write_static
from acbslurm.gpu.mapping import device_minor
from acbslurm.gpu.node import job_gpus
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


def _site(tmp_path: Path, gpus: list[GpuInfo], gres: str = "AutoDetect=off\n") -> Settings:
    write_static(tmp_path / "gpus.json", gpus)
    (tmp_path / "gres.conf").write_text(gres)
    return Settings(
        gpu_inventory=str(tmp_path / "gpus.json"), gres_conf=str(tmp_path / "gres.conf")
    )


def test_slurm_job_prefers_the_task_prolog_uuids(tmp_path: Path) -> None:
    env = {"SLURM_JOB_ID": "5", "ACBSLURM_GPU_UUIDS": "GPU-2,GPU-0", "SLURM_JOB_GPUS": "0"}
    gpus = slurm_job_gpus(env, _site(tmp_path, INV))
    assert [(g.id, g.name) for g in gpus] == [("GPU-2", "H200"), ("GPU-0", "H200")]
    # Without a static inventory the prolog's UUIDs are taken as they are.
    assert [g.id for g in slurm_job_gpus(env, Settings())] == ["GPU-2", "GPU-0"]


def test_slurm_job_gpus_are_gres_indices_mapped_through_gres_conf(tmp_path: Path) -> None:
    """SLURM_JOB_GPUS holds positions in gres.conf's device list, not minor numbers: with
    gres.conf's order unlike the minors' the broker must lend the GPUs the prolog maps."""
    # Real character devices stand in for /dev/nvidiaN: only their minor numbers count.
    files = ["/dev/full", "/dev/zero", "/dev/null", "/dev/urandom"]
    minors = [device_minor(f) for f in files]
    gpus = [
        GpuInfo(index=i, minor=m, uuid=f"GPU-{m}", name="H200")
        for i, m in enumerate(sorted(minors))
    ]
    settings = _site(tmp_path, gpus, f"Name=gpu File={','.join(files)}\n")
    env = {"SLURM_JOB_ID": "5", "SLURM_JOB_GPUS": "3,0", "SLURMD_NODENAME": "n1"}
    want = [f"GPU-{device_minor('/dev/urandom')}", f"GPU-{device_minor('/dev/full')}"]
    assert [g.id for g in slurm_job_gpus(env, settings)] == want
    found = resolve_devices("slurm", env, settings)
    assert [d.id for d in found.devices] == want
    assert job_gpus(env, settings).uuids == want  # what the prolog records


def test_slurm_job_gpus_errors(tmp_path: Path) -> None:
    settings = _site(tmp_path, INV, "Name=gpu File=/dev/null\n")
    with pytest.raises(GpuMappingError, match="no GPUs"):
        slurm_job_gpus({"SLURM_JOB_ID": "5"}, settings)
    with pytest.raises(GpuMappingError, match=r"index 9 but gres\.conf lists only 1"):
        slurm_job_gpus({"SLURM_JOB_ID": "5", "SLURM_JOB_GPUS": "9"}, settings)
    # Plain numbers in CUDA_VISIBLE_DEVICES are the step's own: refused, as by the prolog.
    with pytest.raises(GpuMappingError, match="holds indices but neither SLURM_JOB_GPUS"):
        slurm_job_gpus({"SLURM_JOB_ID": "5", "CUDA_VISIBLE_DEVICES": "1"}, settings)


def test_inside_a_job_auto_manages_exactly_the_jobs_gpus(tmp_path: Path) -> None:
    settings = _site(tmp_path, INV)
    env = {"SLURM_JOB_ID": "42", "CUDA_VISIBLE_DEVICES": "GPU-1"}
    found = resolve_devices("auto", env, settings)
    assert [d.id for d in found.devices] == ["GPU-1"] and "42" in found.source
    outside = resolve_devices("auto", {}, settings)
    assert [d.id for d in outside.devices] == ["GPU-0", "GPU-1", "GPU-2", "GPU-3"]


def test_addresses() -> None:
    assert parse_address("unix:///run/b.sock") == "unix:/run/b.sock"
    assert parse_address("127.0.0.1:5000") == "127.0.0.1:5000"
    for bad in ("unix:b.sock", "host", "host:99999"):
        with pytest.raises(ConfigError):
            parse_address(bad)
    assert default_address({"SLURM_JOB_ID": "9"}) == "unix:/run/acbslurm/job/9/broker.sock"
    assert default_address({"ACBSLURM_BROKER_ADDRESS": "h:1", "SLURM_JOB_ID": "9"}) == "h:1"
