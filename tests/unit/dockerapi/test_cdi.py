"""Reading CDI specs as the daemon's client sees them (no daemon)."""

from __future__ import annotations

from pathlib import Path

import pytest

from acbslurm.dockerapi import cdi
from acbslurm.errors import ConfigError
from acbslurm.gpuvalue import Gpu

TOOLKIT_YAML = """\
---
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
- name: GPU-a
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
- name: all
containerEdits:
  env:
  - NVIDIA_VISIBLE_DEVICES=void
"""


def test_the_toolkits_yaml(tmp_path: Path) -> None:
    (tmp_path / "nvidia.yaml").write_text(TOOLKIT_YAML)
    (tmp_path / "notes.txt").write_text("not a spec")
    (spec,) = cdi.load_specs([str(tmp_path)])
    assert spec.names == ["0", "GPU-a", "all"]
    assert spec.nodes["GPU-a"] == ["/dev/nvidia0"]
    assert cdi.gpu_names([str(tmp_path), "/nonexistent"]) == {"0", "GPU-a", "all"}


def test_spec_dirs_from_info() -> None:
    assert cdi.spec_dirs({"CDISpecDirs": ["/etc/cdi", "/var/run/cdi"]}) == [
        "/etc/cdi",
        "/var/run/cdi",
    ]
    assert cdi.spec_dirs({"CDISpecDirs": None}) == []
    assert cdi.spec_dirs({}) == []


def test_device_ids_uuid_first_then_index() -> None:
    assert cdi.device_ids([Gpu("GPU-a", 0), Gpu("GPU-b", 1)], {"GPU-a", "1"}) == [
        "nvidia.com/gpu=GPU-a",
        "nvidia.com/gpu=1",
    ]
    # unknown names: the UUID (Docker's error then names it)
    assert cdi.device_ids([Gpu("GPU-c", 5)], {"0"}) == ["nvidia.com/gpu=GPU-c"]
    # Slurm named UUIDs only: no index to fall back on
    assert cdi.device_ids([Gpu("GPU-c")], {"0"}) == ["nvidia.com/gpu=GPU-c"]


@pytest.mark.parametrize("text", ["[1, 2]", "kind: x\n", "{a: [b"])
def test_a_broken_spec_is_a_config_error(tmp_path: Path, text: str) -> None:
    (tmp_path / "bad.yaml").write_text(text)
    with pytest.raises(ConfigError, match=r"bad\.yaml"):
        cdi.load_specs([str(tmp_path)])
    assert cdi.gpu_names([str(tmp_path)]) is None


def test_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    import os

    os.mkfifo(tmp_path / "nvidia.yaml")
    with pytest.raises(ConfigError, match="not a regular file"):
        cdi.load_specs([str(tmp_path)])
