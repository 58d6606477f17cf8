"""The GPU fence (gpu/fence.py, docs/admin-guide.md "GPU fence"): is it installed, and
can nothing undo it?

Checked: the ``gpu_fence`` setting; each per-GPU device file of the node (root:root,
no world access, no group but root's with access, named ACL users only of jobs recorded
on the node); the NVIDIA driver's own device-file options (it makes the files itself
unless told not to); udev rules that would open the files again.
"""

from __future__ import annotations

import glob
import os
import re

from acbslurm.doctor.context import Context
from acbslurm.doctor.result import Check, fail, ok, skip, warn
from acbslurm.gpu.acl import AclError, show
from acbslurm.gpu.fence import node_gpu_files, node_records, read_acl
from acbslurm.gpuvalue import minors as known_minors

NAME = "gpu-fence"
PARAMS = "/proc/driver/nvidia/params"
UDEV_DIRS = ("/etc/udev/rules.d", "/run/udev/rules.d", "/usr/lib/udev/rules.d", "/lib/udev/rules.d")
FIX_MODPROBE = (
    "in /etc/modprobe.d/nvidia-fence.conf: options nvidia NVreg_DeviceFileMode=0660 "
    "NVreg_DeviceFileUID=0 NVreg_DeviceFileGID=0 NVreg_ModifyDeviceFiles=0; then "
    "update-initramfs -u and reload the driver (or reboot)"
)
FIX_FILES = "chown root:root {f} && chmod 0660 {f} (and the driver options: see the next line)"
FIX_SETTING = "set gpu_fence: true in the settings file once the device files are fenced"
# A udev rule that gives NVIDIA device files to everyone: MODE with a world bit, or
# logind's uaccess tag (an ACL for whoever sits at the console).
_OPEN_RULE = re.compile(r'MODE\s*:?=\s*"?0?[0-7]{2}[2367](?![0-7])|TAG\+?=\s*"?uaccess')


def driver_params(path: str = PARAMS) -> dict[str, str] | None:
    """The driver's ``Name: value`` lines; None when no NVIDIA driver is loaded."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def param_problems(params: dict[str, str]) -> list[str]:
    """What in the driver's options opens the GPU files to other users, or undoes the
    fence (the values are decimal there: 0660 is 432)."""
    problems = []
    try:
        mode = int(params.get("DeviceFileMode", "438"))
        gid = int(params.get("DeviceFileGID", "0"))
        modify = int(params.get("ModifyDeviceFiles", "1"))
    except ValueError:
        return [f"unreadable driver options {params!r}"]
    if mode & 0o007:
        problems.append(f"NVreg_DeviceFileMode={mode:04o} gives every user the GPUs")
    if gid != 0 and mode & 0o070:
        problems.append(f"NVreg_DeviceFileGID={gid} with mode {mode:04o} gives a group the GPUs")
    if modify:
        problems.append(
            "NVreg_ModifyDeviceFiles=1: the driver (nvidia-modprobe) re-makes the device files "
            "with its own mode and without the fence's ACL entries"
        )
    return problems


def udev_problems(dirs: tuple[str, ...] = UDEV_DIRS) -> list[str]:
    """udev rules for NVIDIA devices that would give them to every user."""
    out = []
    for d in dirs:
        for path in sorted(glob.glob(os.path.join(d, "*.rules"))):
            try:
                with open(path, errors="replace") as f:
                    lines = f.read().splitlines()
            except OSError:
                continue
            for n, line in enumerate(lines, 1):
                text = line.split("#", 1)[0]
                if "nvidia" in text.lower() and _OPEN_RULE.search(text):
                    out.append(f"{path}:{n}: {text.strip()}")
    return out


def file_problems(ctx: Context, files: dict[str, int]) -> list[str]:
    """Device files that are open to others than their jobs' users."""
    records, _ = node_records(ctx.settings.record_dir, ctx.node)
    holders: dict[int, set[int]] = {}
    for rec in records:
        for minor in known_minors(rec.gpus):
            holders.setdefault(minor, set()).add(rec.uid)
    out = []
    for path, minor in sorted(files.items()):
        out += _file_problems(path, holders.get(minor, set()))
    return out


def _file_problems(path: str, users: set[int]) -> list[str]:
    """What opens ``path`` to others than ``users`` (those of its recorded jobs)."""
    st = os.lstat(path)
    try:
        acl = read_acl(path)
    except (OSError, AclError) as exc:
        return [f"{path}: its ACL cannot be read ({exc})"]
    out = []
    if acl.other:
        out.append(f"{path} is mode {st.st_mode & 0o777:04o}: every user may open it")
    # the group's own entry, not the mode's group bits (those show an ACL's mask)
    if st.st_uid != 0 or (st.st_gid != 0 and acl.group_obj):
        out.append(f"{path} belongs to {st.st_uid}:{st.st_gid}, not root:root")
    if acl.groups:
        out.append(f"{path} ({show(acl)}) lets named groups in")
    stray = [uid for uid, _ in acl.users if uid not in users]
    if stray:
        out.append(f"{path} ({show(acl)}) lets users {stray} in without a job record")
    return out


def check_fence(ctx: Context, params_path: str = PARAMS) -> Check:
    files = node_gpu_files(ctx.settings, ctx.node)
    if not files:
        return skip(NAME, "no GPU device files on this node")
    params = driver_params(params_path)
    driver = param_problems(params) if params is not None else []
    problems = file_problems(ctx, files) + driver + udev_problems()
    where = (
        f"no {params_path} (no NVIDIA driver loaded: the driver's options are not checked)"
        if params is None
        else "driver options fenced"
    )
    if not ctx.settings.gpu_fence:
        return warn(
            NAME,
            f"off: the gpu_fence setting is false, {len(files)} GPU file(s) unfenced; {where}",
            FIX_SETTING
            if not problems
            else f"{FIX_FILES.format(f='/dev/nvidia[0-9]*')}; {FIX_MODPROBE}; {FIX_SETTING}",
        )
    if problems:
        fix = FIX_FILES.format(f=" ".join(sorted(files)))
        if driver:
            fix += f"; {FIX_MODPROBE}"
        if any(".rules:" in p for p in problems):
            fix += "; remove MODE=0666/uaccess from the NVIDIA udev rules named"
        return fail(NAME, "; ".join(problems), fix)
    return ok(NAME, f"{len(files)} GPU file(s) fenced (root:root, no world access); {where}")
