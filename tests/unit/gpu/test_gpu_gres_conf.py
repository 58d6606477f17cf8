from pathlib import Path

import pytest

from acbslurm.errors import ConfigError
from acbslurm.gpu.gres_conf import gpu_device_files, gpu_gres, node_gpu_devices
from acbslurm.gpu.inventory import GpuInfo


def test_devices_of_this_node_in_slurm_order(tmp_path: Path) -> None:
    conf = tmp_path / "gres.conf"
    conf.write_text(
        "# comment\n"
        "AutoDetect=off\n"
        "NodeName=other Name=gpu File=/dev/nvidia[0-7]\n"
        "NodeName=gpu[1-2] Name=gpu Type=h200 File=/dev/nvidia[2-3]  # trailing\n"
        "NodeName=gpu[1-2] Name=gpu Type=h200 File=/dev/nvidia0,/dev/nvidia1\n"
        "NodeName=gpu1 Name=shard Count=8\n"
        "Name=gpu File=/dev/nvidia10\n"
    )
    # Sorted by the number at the end of the file name, like Slurm's gres/gpu plugin.
    assert gpu_device_files(conf, "gpu1") == [
        "/dev/nvidia0",
        "/dev/nvidia1",
        "/dev/nvidia2",
        "/dev/nvidia3",
        "/dev/nvidia10",
    ]
    assert gpu_device_files(conf, "other")[:2] == ["/dev/nvidia0", "/dev/nvidia1"]
    assert gpu_device_files(conf, "nobody") == ["/dev/nvidia10"]


def test_include_and_errors(tmp_path: Path) -> None:
    (tmp_path / "gpus.conf").write_text("Name=gpu File=/x/nvidia[0-1]\n")
    conf = tmp_path / "gres.conf"
    conf.write_text("Include gpus.conf\n")
    assert gpu_device_files(conf, "n") == ["/x/nvidia0", "/x/nvidia1"]
    conf.write_text("Name=gpu File\n")
    with pytest.raises(ConfigError, match=r"gres.conf:1: expected Key=Value, got 'File'"):
        gpu_device_files(conf, "n")
    with pytest.raises(ConfigError, match="does not exist"):
        gpu_device_files(tmp_path / "missing.conf", "n")


def _inventory(*minors: int) -> list[GpuInfo]:
    return [GpuInfo(index=i, minor=m, uuid=f"GPU-{m:08d}") for i, m in enumerate(minors)]


def test_autodetect_nvml_without_files_uses_the_inventory_by_minor(tmp_path: Path) -> None:
    conf = tmp_path / "gres.conf"
    conf.write_text("AutoDetect=nvml\nNodeName=gpu1 Name=gpu Type=h200 Count=3\n")
    assert gpu_gres(conf, "gpu1") == ([], "nvml")
    # NVML's enumeration order (index) does not matter: slurmd sorts by device file.
    inv = [*_inventory(10, 2, 1), GpuInfo(index=9, minor=2, uuid="MIG-x")]
    assert node_gpu_devices(conf, "gpu1", inv) == ["/dev/nvidia1", "/dev/nvidia2", "/dev/nvidia10"]


def test_autodetect_per_node_beats_global(tmp_path: Path) -> None:
    conf = tmp_path / "gres.conf"
    conf.write_text("AutoDetect=off\nNodeName=gpu[1-2] AutoDetect=nvml\n")
    assert gpu_gres(conf, "gpu2")[1] == "nvml"
    assert gpu_gres(conf, "gpu3")[1] == "off"


def test_files_win_over_autodetect(tmp_path: Path) -> None:
    conf = tmp_path / "gres.conf"
    conf.write_text("AutoDetect=nvml\nName=gpu File=/dev/nvidia[0-1]\n")
    assert node_gpu_devices(conf, "n", _inventory(5)) == ["/dev/nvidia0", "/dev/nvidia1"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("NodeName=n Name=gpu Count=2\n", "lists no GPU device files .* AutoDetect=nvml"),
        ("AutoDetect=off\n", "lists no GPU device files"),
        ("AutoDetect=rsmi\n", "AutoDetect=rsmi is not supported"),
    ],
)
def test_no_files_and_no_nvml_fails_clearly(tmp_path: Path, text: str, message: str) -> None:
    conf = tmp_path / "gres.conf"
    conf.write_text(text)
    with pytest.raises(ConfigError, match=message):
        node_gpu_devices(conf, "n", _inventory(0))


def test_prolog_mapping_with_autodetect(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import acbslurm.gpu.node as node
    from acbslurm.config import Settings
    from acbslurm.gpu.inventory import write_static

    inv = [
        GpuInfo(index=0, minor=1, uuid="GPU-b", device="/x/nvidia1"),
        GpuInfo(index=1, minor=0, uuid="GPU-a", device="/x/nvidia0"),
    ]
    write_static(tmp_path / "inv.json", inv)
    conf = tmp_path / "gres.conf"
    conf.write_text("AutoDetect=nvml\n")
    settings = Settings(gpu_inventory=str(tmp_path / "inv.json"), gres_conf=str(conf))
    real_map = node.map_job_gpus
    minors = {"/x/nvidia0": 0, "/x/nvidia1": 1}
    monkeypatch.setattr(
        node,
        "map_job_gpus",
        lambda e, d, i, node: real_map(e, d, i, minor_of=minors.__getitem__, node=node),
    )
    env = {"SLURM_JOB_GPUS": "1", "SLURMD_NODENAME": "n"}
    assert node.job_gpus(env, settings).uuids == ["GPU-b"]
