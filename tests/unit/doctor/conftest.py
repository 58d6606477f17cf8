"""A fake node for the doctor's checks: settings, slurm.conf, gres.conf, inventory and
device nodes in a temporary directory."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from acbslurm.config import Settings
from acbslurm.doctor.context import Context
from acbslurm.gpu.inventory import GpuInfo, write_static

UUIDS = ["GPU-11111111-2222-3333-4444-555555555555", "GPU-66666666-7777-8888-9999-000000000000"]

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="root-owned files and device nodes")


def hook_script(path: Path, body: str, mode: int = 0o755) -> Path:
    path.write_text(body)
    path.chmod(mode)
    return path


@pytest.fixture
def node() -> Iterator[Path]:
    # Not pytest's tmp_path, whose root is its owner's alone: the TaskProlog check wants
    # programs that job users can run.
    with tempfile.TemporaryDirectory(prefix="acbslurm-doctor-") as d:
        os.chmod(d, 0o755)
        yield _make_node(Path(d))


def _make_node(tmp_path: Path) -> Path:
    """Two emulated GPUs (minors 0 and 1), their inventory, gres.conf and slurm.conf."""
    dev = tmp_path / "dev"
    dev.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    for i in range(3):
        os.mknod(dev / f"nvidia{i}", 0o600 | 0o020000, os.makedev(195, i))
    inv = [GpuInfo(index=i, minor=1 - i, uuid=UUIDS[1 - i]) for i in range(2)]
    write_static(tmp_path / "gpus.json", inv)
    (tmp_path / "gres.conf").write_text(f"NodeName=n1 Name=gpu File={dev}/nvidia[0-1]\n")
    libexec = tmp_path / "libexec"
    libexec.mkdir()
    for name, func in [
        ("acbslurm-prolog", "prolog_main"),
        ("acbslurm-epilog", "epilog_main"),
        ("acbslurm-task-prolog", "task_prolog_main"),
    ]:
        hook_script(
            libexec / name, f"#!/bin/sh\nexec python3 -c 'from x import {func}; {func}()'\n"
        )
    (tmp_path / "hooks.conf").write_text(
        f"Prolog={libexec}/acbslurm-prolog\nEpilog={libexec}/acbslurm-epilog\n"
        f"TaskProlog={libexec}/acbslurm-task-prolog\n"
    )
    (tmp_path / "slurm.conf").write_text(
        "ClusterName=c  # comment\nprologflags=Alloc,Contain\nKillWait=30\n"
        "Include hooks.conf\nNodeName=n1 CPUs=8 Gres=gpu:h200:2 State=UNKNOWN\n"
    )
    return tmp_path


@pytest.fixture
def make_ctx(node: Path) -> Callable[..., Context]:
    def make(
        uid: int = 1001,
        user: str = "user1",
        env: Any = None,
        caller_uid: int = 1001,
        **settings: Any,
    ) -> Context:
        base: dict[str, Any] = {
            "gpu_inventory": str(node / "gpus.json"),
            "gres_conf": str(node / "gres.conf"),
            "slurm_conf": str(node / "slurm.conf"),
            "record_dir": str(node / "jobs"),
            "job_runtime_dir": str(node / "job"),
            "docker_host": f"unix://{node}/run/{{user}}/docker.sock",
        }
        base.update(settings)
        env = env or {"PATH": "/usr/bin:/bin"}
        return Context(Settings(**base), env, uid, user, "n1", caller_uid=caller_uid)

    return make
