"""nvml_inventory's use of the pynvml API, against a small in-memory stand-in module.

(No NVIDIA driver here; bench/gpu_map_check.py runs the real thing on a GPU machine.)
"""

import sys
import types
from typing import Any

import pytest

from acbslurm.errors import SetupError
from acbslurm.gpu.nvml import nvml_inventory


class NVMLError(Exception):
    pass


def fake_pynvml(gpus: list[dict[str, Any]], fail_init: bool = False) -> types.ModuleType:
    m = types.ModuleType("pynvml")
    m.NVMLError = NVMLError  # type: ignore[attr-defined]
    m.NVML_DEVICE_MIG_ENABLE = 1  # type: ignore[attr-defined]
    calls: list[str] = []
    m.calls = calls  # type: ignore[attr-defined]

    def init() -> None:
        if fail_init:
            raise NVMLError("Driver Not Loaded")
        calls.append("init")

    def mig_mode(h: dict[str, Any]) -> tuple[int, int]:
        if "mig" not in h:
            raise NVMLError("Not Supported")
        return (1, 1) if h["mig"] else (0, 0)

    def mig_handle(h: dict[str, Any], j: int) -> dict[str, Any]:
        if j >= len(h["mig"]):
            raise NVMLError("Not Found")
        return dict(h["mig"][j])

    m.nvmlInit = init  # type: ignore[attr-defined]
    m.nvmlShutdown = lambda: calls.append("shutdown")  # type: ignore[attr-defined]
    m.nvmlDeviceGetCount = lambda: len(gpus)  # type: ignore[attr-defined]
    m.nvmlDeviceGetHandleByIndex = lambda i: gpus[i]  # type: ignore[attr-defined]
    m.nvmlDeviceGetMinorNumber = lambda h: h["minor"]  # type: ignore[attr-defined]
    m.nvmlDeviceGetUUID = lambda h: h["uuid"]  # type: ignore[attr-defined]
    m.nvmlDeviceGetName = lambda h: h.get("name", b"NVIDIA H200")  # type: ignore[attr-defined]
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=h.get("mem", 1))  # type: ignore[attr-defined]
    m.nvmlDeviceGetMigMode = mig_mode  # type: ignore[attr-defined]
    m.nvmlDeviceGetMaxMigDeviceCount = lambda h: 7  # type: ignore[attr-defined]
    m.nvmlDeviceGetMigDeviceHandleByIndex = mig_handle  # type: ignore[attr-defined]
    return m


def test_gpus_by_minor_and_uuid_with_mig(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = [
        {"minor": 3, "uuid": b"GPU-aaa", "mem": 2**30},
        {"minor": 0, "uuid": "GPU-bbb", "mig": [{"uuid": "MIG-b1", "name": "1g.18gb"}]},
        {"minor": 1, "uuid": "GPU-ccc", "mig": []},
    ]
    m = fake_pynvml(gpus)
    monkeypatch.setitem(sys.modules, "pynvml", m)
    inv = nvml_inventory()
    assert [(g.index, g.minor, g.uuid) for g in inv] == [
        (0, 3, "GPU-aaa"),
        (1, 0, "GPU-bbb"),
        (1, 0, "MIG-b1"),
        (2, 1, "GPU-ccc"),
    ]
    assert inv[0].device == "/dev/nvidia3" and inv[0].memory_total == 2**30
    assert inv[0].name == "NVIDIA H200"
    assert m.calls == ["init", "shutdown"]  # type: ignore[attr-defined]


def test_no_driver_is_a_setup_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([], fail_init=True))
    with pytest.raises(SetupError, match="static inventory"):
        nvml_inventory()
