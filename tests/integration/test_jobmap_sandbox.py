"""The GPU-to-job files of dcgm-exporter and jobstats (docs/admin-guide.md, "Monitoring"),
written by the sandbox's real prolog for jobs of user1 and user2 and removed by their
epilogs: each file as the tool parses it, for two jobs on two GPUs, and gone after."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from sandboxtest import wait_gone, wait_job, wait_until

from acbslurm.config import load_settings
from acbslurm.jobrecord import read_record

pytestmark = pytest.mark.integration


def files(path: str) -> dict[str, str]:
    return (
        {n: Path(path, n).read_text() for n in sorted(os.listdir(path))}
        if os.path.isdir(path)
        else {}
    )


def submit_as(sb: Any, user: str, scripts: Path) -> str:
    # Runs until the test creates its stop file: the files are read while both run.
    body = f"until [ -e {scripts}/stop-$SLURM_JOB_ID ]; do sleep 0.2; done\n"
    script = scripts / f"jobmap-{user}.sh"
    script.write_text("#!/bin/bash\n" + body)
    script.chmod(0o755)
    argv = ["sbatch", "--parsable", "--gres=gpu:1", "-t", "5", "-o", "/dev/null", str(script)]
    return str(sb.run_as(user, argv, timeout=30).stdout.strip().split(";")[0])


def test_dcgm_and_jobstats_files_for_two_jobs_on_two_gpus_and_gone_after(
    idle: Any, scripts: Path
) -> None:
    settings = load_settings(str(idle.layout.acbslurm_conf))
    dcgm, gpustat = settings.dcgm_job_mapping_dir, settings.gpustat_dir
    assert dcgm and gpustat, "the sandbox sets both (sandbox/render.py)"
    jobs = {user: submit_as(idle, user, scripts) for user in ("user1", "user2")}
    try:
        for job in jobs.values():
            wait_job(idle, job, ("RUNNING",), 60)
        recs = {
            u: wait_until(f"job {j}'s record", lambda j=j: read_record(settings.record_dir, j), 30)
            for u, j in jobs.items()
        }
        inventory = {g.uuid: g for g in idle.gpus}
        want_dcgm: dict[str, str] = {}
        want_gpustat: dict[str, str] = {}
        for user, job in jobs.items():
            (gpu,) = recs[user].gpus
            index = str(inventory[gpu.uuid].index)  # NVML's index, as the tools name GPUs
            uid = str(recs[user].uid)
            want_dcgm |= {index: f"{job}\n", gpu.uuid: f"{job}\n"}  # one job id a line
            want_gpustat |= {index: f"{job} {uid}\n", gpu.uuid: f"{job} {uid}\n"}
        assert recs["user1"].gpus[0].uuid != recs["user2"].gpus[0].uuid
        # The prolog writes them last, after the record: waited for, then compared whole.
        wait_until("the dcgm-exporter files", lambda: files(dcgm) == want_dcgm, 30)
        wait_until("the jobstats files", lambda: files(gpustat) == want_gpustat, 30)
        assert files(dcgm) == want_dcgm
        assert files(gpustat) == want_gpustat
    finally:
        for job in jobs.values():
            (scripts / f"stop-{job}").touch()
    for job in jobs.values():
        wait_gone(idle, job, 60)
    assert files(dcgm) == files(gpustat) == {}
