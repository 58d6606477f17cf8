from pathlib import Path

import pytest

from acbslurm.errors import ConfigError
from acbslurm.gpu.gres_conf import gpu_device_files
from acbslurm.slurm.hostlist import expand_hostlist


def test_expand_ranges_lists_and_padding() -> None:
    assert expand_hostlist("/dev/nvidia[0-3]") == [f"/dev/nvidia{i}" for i in range(4)]
    assert expand_hostlist("n[01-03,7]") == ["n01", "n02", "n03", "n7"]
    assert expand_hostlist("a,b[1-2]") == ["a", "b1", "b2"]
    assert expand_hostlist("r[1-2]n[1-2]") == ["r1n1", "r1n2", "r2n1", "r2n2"]
    assert expand_hostlist("plain") == ["plain"]


@pytest.mark.parametrize("bad", ["n[3-1]", "n[a-b]", "n[1-2", "n1-2]"])
def test_expand_rejects_bad_ranges(bad: str) -> None:
    with pytest.raises(ConfigError, match="n"):
        expand_hostlist(bad)


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
