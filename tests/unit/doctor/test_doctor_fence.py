"""The doctor's GPU fence check on conftest's node (device files 0600 root:root)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from conftest import needs_root

from acbslurm.doctor.context import Context
from acbslurm.doctor.fence import check_fence, param_problems, udev_problems
from acbslurm.gpu.acl import Acl
from acbslurm.gpu.fence import write_acl
from acbslurm.gpuvalue import Gpu
from acbslurm.jobrecord import JobRecord, write_record

PARAMS_OK = "DeviceFileUID: 0\nDeviceFileGID: 0\nDeviceFileMode: 432\nModifyDeviceFiles: 0\n"


@needs_root
def test_fenced_files_and_no_driver_is_ok_and_says_so(
    node: Path, make_ctx: Callable[..., Context]
) -> None:
    c = check_fence(make_ctx(gpu_fence=True), str(node / "no-params"))
    assert c.status == "ok", c
    assert "2 GPU file(s) fenced" in c.summary and "no NVIDIA driver loaded" in c.summary


@needs_root
def test_the_setting_off_is_a_warning_with_the_steps(
    node: Path, make_ctx: Callable[..., Context]
) -> None:
    c = check_fence(make_ctx(), str(node / "no-params"))
    assert c.status == "warn" and "gpu_fence" in c.fix


@needs_root
def test_a_world_open_file_and_a_stray_acl_user_fail_with_a_fix(
    node: Path, make_ctx: Callable[..., Context]
) -> None:
    os.chmod(node / "dev" / "nvidia0", 0o666)
    write_record(
        str(node / "jobs"), JobRecord("5", "user1", 1001, "n1", (Gpu("GPU-b", 1, 1, "n1"),))
    )
    write_acl(str(node / "dev" / "nvidia1"), Acl(6, 0, 0, users=((1001, 6), (1002, 6))))
    c = check_fence(make_ctx(gpu_fence=True), str(node / "no-params"))
    assert c.status == "fail"
    assert "nvidia0 is mode 0666: every user may open it" in c.summary
    assert "lets users [1002] in without a job record" in c.summary
    assert "chmod 0660" in c.fix


@needs_root
def test_the_drivers_options_are_checked(node: Path, make_ctx: Callable[..., Context]) -> None:
    params = node / "params"
    params.write_text(PARAMS_OK)
    assert check_fence(make_ctx(gpu_fence=True), str(params)).status == "ok"
    params.write_text(PARAMS_OK.replace("432", "438").replace("Files: 0", "Files: 1"))
    c = check_fence(make_ctx(gpu_fence=True), str(params))
    assert c.status == "fail" and "NVreg_DeviceFileMode=0660" in c.fix
    assert "NVreg_DeviceFileMode=0666 gives every user the GPUs" in c.summary


def test_param_problems() -> None:
    assert param_problems({"DeviceFileMode": "432", "ModifyDeviceFiles": "0"}) == []
    assert len(param_problems({})) == 2  # the driver's defaults: 0666, modify
    assert (
        "group"
        in param_problems(
            {"DeviceFileMode": "432", "DeviceFileGID": "44", "ModifyDeviceFiles": "0"}
        )[0]
    )


def test_udev_rules_that_open_nvidia_devices(tmp_path: Path) -> None:
    (tmp_path / "70-nvidia.rules").write_text(
        '# MODE="0666" nvidia in a comment\n'
        'KERNEL=="nvidia[0-9]*", MODE="0666"\n'
        'KERNEL=="nvidia*", TAG+="uaccess"\n'
        'KERNEL=="nvidia[0-9]*", MODE="0660", GROUP="root"\n'
        'KERNEL=="sda", MODE="0666"\n'
    )
    got = udev_problems((str(tmp_path),))
    assert [g.split(": ", 1)[0].rsplit(":", 1)[1] for g in got] == ["2", "3"]
