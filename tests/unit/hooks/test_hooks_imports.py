"""The Slurm hook path imports no click, typing, pathlib, logging or dataclasses.

slurmd waits for the prolog and the epilog on every job, and each of those modules
costs milliseconds to import (bench/hooks_bench.py). This runs the three hooks through
their real code paths, GPU mapping and the Docker sweep included, in a fresh
interpreter, and lists what they imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from processcoverage import UNMEASURED

from acbslurm.gpu.inventory import GpuInfo, write_static

ROOT = Path(__file__).resolve().parents[3]
SLOW = (
    "click", "typing", "pathlib", "logging", "shutil", "yaml", "docker", "jinja2", "MySQLdb",
    "grpc", "dataclasses",
)  # fmt: skip


def test_the_hooks_import_nothing_slow(tmp_path: Path) -> None:
    uuid = "GPU-11111111-2222-3333-4444-555555555555"
    write_static(tmp_path / "inv.json", [GpuInfo(index=0, minor=0, uuid=uuid)])
    (tmp_path / "settings.json").write_text(
        json.dumps(
            {
                "gpu_inventory": str(tmp_path / "inv.json"),
                "record_dir": str(tmp_path / "rec"),
                "docker_host": f"unix://{tmp_path}/no-docker.sock",
                "dcgm_job_mapping_dir": str(tmp_path / "dcgm"),
                "gpustat_dir": str(tmp_path / "gpustat"),
            }
        )
    )
    probe = textwrap.dedent(
        f"""
        import os, sys
        from acbslurm.hooks import epilog, prolog, task_prolog
        env = dict(SLURM_JOB_ID="7", SLURM_JOB_UID=str(os.getuid()), SLURM_JOB_USER="u",
                   SLURMD_NODENAME="n1", CUDA_VISIBLE_DEVICES="{uuid}")
        codes = [prolog.run_prolog(env), task_prolog.run_task_prolog(env), epilog.run_epilog(env)]
        # The epilog's drain (its answer to a container it could not remove), as called there.
        from acbslurm.config import load_settings
        epilog._drain(env, load_settings(), "probe")
        slow = {SLOW!r}
        print(codes, sorted(m for m in sys.modules if m.split(".")[0] in slow))
        """
    )
    r = subprocess.run(
        [sys.executable, "-c", probe],
        # slurmd gives hooks a bare environment; no scontrol on PATH: it fails fast.
        env={
            "PATH": str(tmp_path),
            "PYTHONPATH": str(ROOT),
            "ACBSLURM_CONFIG": str(tmp_path / "settings.json"),
            **UNMEASURED,
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    # The prolog mapped and recorded the GPU: the code path under test really ran.
    assert f"GPUs {uuid} recorded" in r.stderr, r.stderr
    assert f"export ACBSLURM_GPU_UUIDS={uuid}" in r.stdout
    assert r.stdout.strip().endswith("[0, 0, 0] []"), r.stdout
    assert not os.path.exists(tmp_path / "rec" / "7.json")  # the epilog removed it
    # The prolog wrote the GPU-to-job files (their directories are there), the epilog
    # removed them.
    assert os.listdir(tmp_path / "dcgm") == os.listdir(tmp_path / "gpustat") == []
    assert "GPU-to-job" not in r.stderr, r.stderr
    assert "cannot drain n1" in r.stderr and "scontrol not found" in r.stderr, r.stderr
