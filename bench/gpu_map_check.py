"""Map a real node's GPUs through acbslurm's code path and print index, minor and UUID.

For a machine with NVIDIA GPUs and no Slurm (e.g. the H200 lent for GPU checks): the
device files /dev/nvidiaN stand in for gres.conf's File= list (or pass --gres-conf), each
position is mapped like a SLURM_JOB_GPUS index (device file -> minor number from the
device node -> NVML GPU with that minor -> UUID), then the UUIDs are mapped back as
CUDA_VISIBLE_DEVICES would carry them. Compares with `nvidia-smi -L` when present.

    python bench/gpu_map_check.py [--gres-conf FILE --node NAME] [--json]
"""

from __future__ import annotations

import argparse
import glob
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from acbslurm.errors import AcbslurmError
from acbslurm.gpu.gres_conf import gpu_device_files
from acbslurm.gpu.mapping import device_minor, map_job_gpus
from acbslurm.gpu.nvml import nvml_inventory


def device_files() -> list[str]:
    files = [f for f in glob.glob("/dev/nvidia*") if re.fullmatch(r"/dev/nvidia\d+", f)]
    return sorted(files, key=lambda f: int(f[len("/dev/nvidia") :]))


def nvidia_smi_uuids() -> list[str]:
    if not shutil.which("nvidia-smi"):
        return []
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    return re.findall(r"UUID: ((?:GPU|MIG)-[0-9a-fA-F-]+)", out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gres-conf", help="map through this gres.conf instead of /dev/nvidia*")
    ap.add_argument("--node", default="", help="node name for --gres-conf")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    try:
        inventory = nvml_inventory()
        devices = gpu_device_files(args.gres_conf, args.node) if args.gres_conf else device_files()
        rows = []
        for i, dev in enumerate(devices):
            job = map_job_gpus({"SLURM_JOB_GPUS": str(i)}, devices, inventory)
            gpu = job.gpus[0]
            back = map_job_gpus({"CUDA_VISIBLE_DEVICES": gpu.uuid}, [], inventory)
            rows.append(
                {
                    "slurm_index": i,
                    "device": dev,
                    "minor": device_minor(dev),
                    "nvml_index": gpu.index,
                    "uuid": gpu.uuid,
                    "name": gpu.name,
                    "memory_gib": round(gpu.memory_total / 2**30, 1),
                    "uuid_maps_back": back.uuids == [gpu.uuid],
                }
            )
    except AcbslurmError as exc:
        print(f"gpu_map_check: {exc}", file=sys.stderr)
        return 3
    smi = nvidia_smi_uuids()
    ok = all(r["uuid_maps_back"] for r in rows) and (
        not smi or sorted(r["uuid"] for r in rows) == sorted(u for u in smi if u.startswith("GPU-"))
    )
    if args.json:
        print(json.dumps({"gpus": rows, "nvidia_smi": smi, "ok": ok}, indent=2))
    else:
        for r in rows:
            print(
                f"slurm index {r['slurm_index']} -> {r['device']} (minor {r['minor']}) -> "
                f"NVML index {r['nvml_index']} -> {r['uuid']} ({r['name']}, "
                f"{r['memory_gib']} GiB)"
            )
        print(f"nvidia-smi -L UUIDs: {', '.join(smi) or '(nvidia-smi not found)'}")
        print("OK: every GPU maps to the same UUID both ways" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
