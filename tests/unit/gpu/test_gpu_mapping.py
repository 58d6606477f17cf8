import os
from pathlib import Path

import pytest

from acbslurm.errors import GpuMappingError
from acbslurm.gpu.inventory import GpuInfo
from acbslurm.gpu.mapping import device_minor, map_job_gpus
from acbslurm.gpuvalue import Gpu

# NVML's index deliberately differs from the minor number: mapping must use the minor.
INVENTORY = [
    GpuInfo(index=0, minor=2, uuid="GPU-aaaa"),
    GpuInfo(index=1, minor=0, uuid="GPU-bbbb"),
    GpuInfo(index=2, minor=1, uuid="GPU-cccc"),
    GpuInfo(index=3, minor=3, uuid="GPU-dddd"),
    GpuInfo(index=3, minor=3, uuid="MIG-1111"),
]
DEVICES = ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2", "/dev/nvidia3"]


def suffix_minor(path: str) -> int:
    return int(path.rsplit("nvidia", 1)[1])


def test_indices_map_through_device_minor_not_nvml_index() -> None:
    got = map_job_gpus({"SLURM_JOB_GPUS": "0,2"}, DEVICES, INVENTORY, suffix_minor)
    assert got.gpus == (Gpu("GPU-bbbb", 0, 0), Gpu("GPU-aaaa", 2, 2))
    assert [g.index for g in got.info] == [1, 0]  # NVML's, kept apart
    got = map_job_gpus({"SLURM_JOB_GPUS": "2"}, DEVICES, INVENTORY, suffix_minor, node="n1")
    assert got.gpus == (Gpu("GPU-aaaa", 2, 2, "n1"),)


def test_uuids_in_cuda_visible_devices_are_accepted() -> None:
    env = {"CUDA_VISIBLE_DEVICES": "GPU-cccc,MIG-1111"}
    got = map_job_gpus(env, [], INVENTORY, suffix_minor)
    assert got.uuids == ["GPU-cccc", "MIG-1111"]
    assert [g.index for g in got.gpus] == [None, None]


def test_uuids_in_slurm_job_gpus_are_accepted() -> None:
    got = map_job_gpus({"SLURM_JOB_GPUS": "GPU-dddd"}, [], INVENTORY, suffix_minor)
    assert got.uuids == ["GPU-dddd"]


def test_indices_cross_checked_against_uuids() -> None:
    env = {"SLURM_JOB_GPUS": "1", "CUDA_VISIBLE_DEVICES": "GPU-cccc"}
    assert map_job_gpus(env, DEVICES, INVENTORY, suffix_minor).uuids == ["GPU-cccc"]
    env["CUDA_VISIBLE_DEVICES"] = "GPU-aaaa"
    with pytest.raises(GpuMappingError, match="disagrees"):
        map_job_gpus(env, DEVICES, INVENTORY, suffix_minor)


def test_no_gpus() -> None:
    assert map_job_gpus({}, DEVICES, INVENTORY, suffix_minor).uuids == []


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SLURM_JOB_GPUS": "4"}, "index 4 but gres.conf lists only 4"),
        ({"SLURM_JOB_GPUS": "x"}, "'x' is neither"),
        ({"SLURM_JOB_GPUS": "GPU-zzzz"}, "GPU-zzzz is not on this node"),
        ({"CUDA_VISIBLE_DEVICES": "0"}, "nor SLURM_STEP_GPUS is set"),
        ({"SLURM_JOB_GPUS": "1,1"}, "names a GPU twice"),
    ],
)
def test_errors_name_the_problem(env: dict[str, str], message: str) -> None:
    with pytest.raises(GpuMappingError, match=message):
        map_job_gpus(env, DEVICES, INVENTORY, suffix_minor)


def test_minor_without_inventory_entry() -> None:
    inv = [g for g in INVENTORY if g.minor != 1]
    with pytest.raises(GpuMappingError, match=r"/dev/nvidia1 \(minor 1\).*no GPU"):
        map_job_gpus({"SLURM_JOB_GPUS": "1"}, DEVICES, inv, suffix_minor)


def test_device_minor_reads_the_device_node(tmp_path: Path) -> None:
    dev = tmp_path / "gpu-a"  # the name carries no number: the minor comes from the node
    try:
        os.mknod(dev, 0o600 | 0o020000, os.makedev(195, 7))
    except PermissionError:
        pytest.skip("mknod needs root")
    assert device_minor(str(dev)) == 7
    (tmp_path / "plain").write_text("")
    with pytest.raises(GpuMappingError, match="not a character device"):
        device_minor(str(tmp_path / "plain"))
    with pytest.raises(GpuMappingError, match="No such file"):
        device_minor(str(tmp_path / "none"))


def test_a_step_maps_its_own_gpus_even_without_slurm_job_gpus() -> None:
    # A bare `srun --gres=gpu:1` outside sbatch sets SLURM_STEP_GPUS and
    # CUDA_VISIBLE_DEVICES, no SLURM_JOB_GPUS (`acbslurm gpus --from-env` failed there).
    env = {"SLURM_STEP_GPUS": "2", "CUDA_VISIBLE_DEVICES": "0"}
    assert map_job_gpus(env, DEVICES, INVENTORY, suffix_minor).uuids == ["GPU-aaaa"]
    # In a step of a batch job the step's GPUs win over the job's.
    env = {"SLURM_JOB_GPUS": "0,2", "SLURM_STEP_GPUS": "0"}
    assert [g.index for g in map_job_gpus(env, DEVICES, INVENTORY, suffix_minor).gpus] == [0]
    with pytest.raises(GpuMappingError, match="SLURM_STEP_GPUS names GPU index 7"):
        map_job_gpus({"SLURM_STEP_GPUS": "7"}, DEVICES, INVENTORY, suffix_minor)
