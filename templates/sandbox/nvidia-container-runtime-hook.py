#!/usr/bin/python3 -I
# SANDBOX-ONLY stand-in for NVIDIA's nvidia-container-runtime-hook. Never install it on a
# machine with real GPUs. It records what Docker asked for and, on the legacy `--gpus`
# path, injects the granted emulated GPUs' device nodes as the real hook does.
# dockerd enables `--gpus` when a program of this name is on its PATH; runc then calls it
# as an OCI prestart hook with the container state (JSON) on stdin, whose bundle holds
# the container's config.json with NVIDIA_VISIBLE_DEVICES in the process environment.
import ctypes
import glob
import json
import os
import sys
import time

RECORD_DIR = "@RECORD_DIR@"
# The sandbox's GPU inventories (gpus.json, or gpus-<node>.json per node): UUID, minor
# number and device file of each emulated GPU.
INVENTORY_GLOB = "@INVENTORY_GLOB@"

state = json.load(sys.stdin)
with open(os.path.join(state["bundle"], "config.json")) as f:
    config = json.load(f)
env = dict(e.split("=", 1) for e in config.get("process", {}).get("env", []) if "=" in e)
# Called from the sandbox's CDI spec (args "cdi"), the devices are what the spec's
# per-device edits set (SANDBOX_CDI_GPU<minor>=<uuid>); NVIDIA_VISIBLE_DEVICES is void.
via = "cdi" if sys.argv[1:2] == ["cdi"] else "nvidia"
if via == "cdi":
    cdi = sorted((k, v) for k, v in env.items() if k.startswith("SANDBOX_CDI_GPU"))
    devices = ",".join(v for _, v in cdi)
else:
    devices = env.get("NVIDIA_VISIBLE_DEVICES", "")
record = {
    "time": time.time(),
    "container": state.get("id", ""),
    "via": via,
    "devices": devices,
    "capabilities": env.get("NVIDIA_DRIVER_CAPABILITIES", ""),
    "hook_args": sys.argv[1:],
}
# One file per container start: concurrent hooks never interleave.
path = os.path.join(RECORD_DIR, record["container"] + ".json")
with open(path + ".tmp", "w") as f:
    json.dump(record, f)
os.replace(path + ".tmp", path)


def emulated_gpus():
    """Every emulated GPU once (by minor number: a one-node gpus.json left beside the
    per-node files names the same device files)."""
    out = {}
    for inv in sorted(glob.glob(INVENTORY_GLOB)):
        with open(inv) as f:
            out.update((g["minor"], g) for g in json.load(f)["gpus"])
    return [out[m] for m in sorted(out)]


def granted(wanted, gpus):
    """The GPUs NVIDIA_VISIBLE_DEVICES names: UUIDs, minor numbers (the host's device
    index, as NVML's on a one-node machine) or "all"; "void", "none" and "" name none."""
    if wanted in ("", "void", "none"):
        return []
    if wanted == "all":
        return gpus
    out = []
    for name in wanted.split(","):
        match = [g for g in gpus if name.strip() in (g["uuid"], str(g["minor"]))]
        if not match:
            sys.exit(f"nvidia-container-runtime-hook (sandbox): unknown device {name!r}")
        out.extend(match)
    return out


def inject(gpus):
    """Bind-mount each GPU's device node onto <rootfs>/dev/nvidia<minor> in the
    container's mount namespace, as nvidia-container-cli does at prestart: runc has
    prepared the rootfs and its /dev there but not yet pivoted into it, so the host's
    paths are still visible. A rootless runtime cannot mknod; a bind mount of the node
    keeps it a device (the host's file system is not nodev)."""
    if not gpus:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    clone_newns, ms_bind = 0x00020000, 4096
    root = config["root"]["path"]
    if not os.path.isabs(root):
        root = os.path.join(state["bundle"], root)
    fd = os.open(f"/proc/{state['pid']}/ns/mnt", os.O_RDONLY)
    if libc.setns(fd, clone_newns) != 0:
        err = ctypes.get_errno()
        sys.exit(f"nvidia-container-runtime-hook (sandbox): setns: {os.strerror(err)}")
    os.close(fd)
    for g in gpus:
        target = os.path.join(root, "dev", f"nvidia{g['minor']}")
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o666))
        if libc.mount(g["device"].encode(), target.encode(), None, ms_bind, None) != 0:
            err = ctypes.get_errno()
            sys.exit(
                f"nvidia-container-runtime-hook (sandbox): mount {g['device']} on "
                f"{target}: {os.strerror(err)}"
            )


if via == "nvidia" and sys.argv[1:2] == ["prestart"]:
    inject(granted(devices, emulated_gpus()))
