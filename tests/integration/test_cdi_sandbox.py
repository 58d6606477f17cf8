"""Issue 20: a GPU job's container gets its GPUs the way the user's daemon offers them.

On a sandbox with CDI (`up --docker 26.1` or `28.5`) `acbslurm run` asks for CDI devices
(``nvidia.com/gpu=<UUID>``) and Docker's own CDI code applies the sandbox's spec
(etc/cdi/nvidia.yaml, the daemon's cdi-spec-dirs); on 20.10, which has none, it asks
for `--gpus` (driver nvidia) as before. Both as user1, on the real daemon.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sandboxtest import (
    IMAGE,
    acbslurm_run,
    docker_api,
    hook_records_by_container,
    submit,
    wait_container,
    wait_job,
)

pytestmark = pytest.mark.integration

# A line "DEV: <the container's /dev/nvidia* nodes>", then its GPU variables.
SHOW = (
    "echo DEV: $(ls /dev | grep nvidia | sort); "
    "env | grep -E '^(SANDBOX_CDI|NVIDIA_VIS)' | sort; sleep 2"
)


@pytest.mark.parametrize("gres", [1, 2])
def test_gpu_job_gets_its_gpus_through_the_daemons_mechanism(
    idle: Any, scripts: Path, gres: int
) -> None:
    sb = idle
    api = docker_api(sb)
    job = submit(sb, scripts, acbslurm_run(IMAGE, "sh", "-c", SHOW), f"--gres=gpu:{gres}")
    c = wait_container(api, job)
    requests = api.inspect_container(c["Id"])["HostConfig"]["DeviceRequests"]
    f = wait_job(sb, job, ("COMPLETED", "FAILED"), 60)
    out = (scripts / f"out-{job}.txt").read_text()
    assert f["ExitCode"] == "0:0", out
    given = _job_gpus(sb, out)
    assert len(given) == gres, out
    (req,) = requests
    seen = hook_records_by_container(sb)[c["Id"]]
    if sb.params.docker.has_cdi:
        assert req["Driver"] == "cdi", requests
        assert sorted(req["DeviceIDs"]) == sorted(f"nvidia.com/gpu={g.uuid}" for g in given)
        # Exactly the job's device nodes at /dev/nvidiaN, and the spec's env edits.
        nodes = next(ln for ln in out.splitlines() if ln.startswith("DEV:")).split()[1:]
        assert nodes == sorted(f"nvidia{g.minor}" for g in given), out
        env = {ln for ln in out.splitlines() if ln.startswith(("SANDBOX_CDI", "NVIDIA_VIS"))}
        want = {f"SANDBOX_CDI_GPU{g.minor}={g.uuid}" for g in given}
        assert env == want | {"NVIDIA_VISIBLE_DEVICES=void"}, out
        assert seen["via"] == "cdi"
    else:
        assert req["Driver"] == "nvidia", requests
        assert sorted(req["DeviceIDs"]) == sorted(g.uuid for g in given)
        assert seen["via"] == "nvidia"
    # What the stand-in hook saw: the job's GPUs, by whichever path.
    assert set(seen["devices"].split(",")) == {g.uuid for g in given}, seen


def _job_gpus(sb: Any, out: str) -> list[Any]:
    """The sandbox's GPUs the job's container was handed, from what it printed or,
    on the nvidia path, from the NVIDIA_VISIBLE_DEVICES Docker set."""
    env = dict(ln.split("=", 1) for ln in out.splitlines() if "=" in ln)
    if sb.params.docker.has_cdi:
        uuids = {v for k, v in env.items() if k.startswith("SANDBOX_CDI_GPU")}
    else:
        uuids = set(env.get("NVIDIA_VISIBLE_DEVICES", "").split(","))
    return [g for g in sb.gpus if g.uuid in uuids]


# The container's /dev/nvidia* nodes, then each one opened read-write: busybox's sh says
# why it could not ("No such device or address" is ENXIO: past the permission check, no
# driver behind the emulated node).
OPEN_EACH = (
    "echo DEV: $(ls /dev | grep nvidia | sort); "
    'for d in /dev/nvidia*; do echo "OPEN $d: $( (exec 3<>$d) 2>&1 )"; done; '
    "env | grep -E '^(SANDBOX_CDI|NVIDIA_VIS)' | sort"
)


def test_a_gpu_jobs_container_holds_exactly_its_gpus_device_node(idle: Any, scripts: Path) -> None:
    """As on a real node, by either path (the legacy hook's bind mount on 20.10, the CDI
    spec's on 26.1/28.5): user1's container sees /dev/nvidiaN of its one GPU only, and
    opening it read-write is allowed (ENXIO), neither missing (ENOENT) nor refused."""
    sb = idle
    job = submit(sb, scripts, acbslurm_run(IMAGE, "sh", "-c", OPEN_EACH), "--gres=gpu:1")
    f = wait_job(sb, job, ("COMPLETED", "FAILED"), 60)
    out = (scripts / f"out-{job}.txt").read_text()
    assert f["ExitCode"] == "0:0", out
    (gpu,) = _job_gpus(sb, out)
    nodes = next(ln for ln in out.splitlines() if ln.startswith("DEV:")).split()[1:]
    assert nodes == [f"nvidia{gpu.minor}"], out
    opened = [ln for ln in out.splitlines() if ln.startswith("OPEN ")]
    assert len(opened) == 1 and opened[0].startswith(f"OPEN /dev/nvidia{gpu.minor}: "), out
    assert "No such device or address" in opened[0], out
