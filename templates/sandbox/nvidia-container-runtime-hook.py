#!/usr/bin/python3 -I
# SANDBOX-ONLY stand-in for NVIDIA's nvidia-container-runtime-hook. Never install it on a
# machine with real GPUs: it grants nothing, it only records what Docker asked for.
# dockerd enables `--gpus` when a program of this name is on its PATH; runc then calls it
# as an OCI prestart hook with the container state (JSON) on stdin, whose bundle holds
# the container's config.json with NVIDIA_VISIBLE_DEVICES in the process environment.
import json
import os
import sys
import time

RECORD_DIR = "@RECORD_DIR@"

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
