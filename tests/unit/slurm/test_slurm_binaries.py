"""Which scontrol a hook runs: the setting, the running slurmd's, PluginDir's, PATH."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from acbslurm.slurm.binaries import (
    beside_daemon,
    beside_plugin_dir,
    client,
    plugin_dir,
    slurm_bin_dir,
)
from acbslurm.slurm.commands import slurm


def _install(root: Path) -> Path:
    for d in ("bin", "sbin", "lib/slurm"):
        (root / d).mkdir(parents=True)
    scontrol = root / "bin" / "scontrol"
    scontrol.write_text("#!/bin/sh\necho scontrol-of-" + root.name + "\n")
    scontrol.chmod(0o755)
    return root


def test_the_setting_wins(tmp_path: Path) -> None:
    assert slurm_bin_dir("/opt/slurm/bin", str(tmp_path / "none.conf"), parent_pid=1) == (
        "/opt/slurm/bin"
    )


def test_plugin_dir_of_slurm_conf_names_the_install(tmp_path: Path) -> None:
    prefix = _install(tmp_path / "slurm-25.11")
    conf = tmp_path / "slurm.conf"
    conf.write_text(f"ClusterName=c\n  plugindir = {prefix}/lib/slurm:/other # comment\n")
    assert plugin_dir(str(conf)) == f"{prefix}/lib/slurm"
    assert beside_plugin_dir(str(conf)) == str(prefix / "bin")
    assert slurm_bin_dir("", str(conf), parent_pid=os.getpid()) == str(prefix / "bin")
    assert plugin_dir(str(tmp_path / "missing.conf")) == ""


def test_the_running_slurmd_names_the_install(tmp_path: Path) -> None:
    prefix = _install(tmp_path / "slurm-x")
    fake_slurmd = prefix / "sbin" / "slurmd"
    # A copy of the interpreter named slurmd (/proc/PID/exe resolves links).
    fake_slurmd.write_bytes(Path(sys.executable).resolve().read_bytes())
    fake_slurmd.chmod(0o755)
    p = subprocess.Popen([str(fake_slurmd), "-c", "import time; time.sleep(30)"])
    try:
        assert beside_daemon(p.pid) == str(prefix / "bin")
        assert slurm_bin_dir("", "/nonexistent", parent_pid=p.pid) == str(prefix / "bin")
    finally:
        p.kill()
        p.wait()
    assert beside_daemon(os.getpid()) == ""  # python is not a Slurm daemon


def test_commands_run_from_the_bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prefix = _install(tmp_path / "site")
    monkeypatch.setenv("PATH", "/nonexistent")
    assert slurm(["scontrol"], bin_dir=str(prefix / "bin")).stdout == "scontrol-of-site\n"
    monkeypatch.setenv("ACBSLURM_SLURM_BIN_DIR", str(prefix / "bin"))
    assert slurm(["scontrol"]).stdout == "scontrol-of-site\n"
    assert client("scontrol", "") == "scontrol"
    assert client("/x/scontrol", "/y") == "/x/scontrol"
