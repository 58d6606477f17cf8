"""`submit` warns of a container's mount sources and env files this host does not
have (warnings only: they may be on the node's own disk)."""

from __future__ import annotations

import getpass
from pathlib import Path

import pytest
from cli_run import acbslurm
from fake_slurm import FakeSlurm

ME = getpass.getuser()


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    monkeypatch.setenv("ACBSLURM_RECORD_DIR", str(tmp_path / "records"))
    (tmp_path / "out").mkdir()
    return tmp_path


def test_submit_warns_of_mount_sources_and_env_files_missing_here(
    cwd: Path, fake_slurm: FakeSlurm
) -> None:
    fake_slurm.set_cluster(accounts={"user1": [ME]})
    (cwd / "data").mkdir()
    (cwd / "here.env").write_text("A=1\n")
    path = cwd / "c.yaml"
    path.write_text(
        "partition: p1\noutput: out/x.out\ncontainer:\n  image: busybox:latest\n"
        f"  mounts: ['{cwd}/data:/data', /nowhere/x:/x:ro]\n"
        "  env_file: [here.env, gone.env]\n"
    )
    res = acbslurm("submit", str(path), "--acbslurm", "/x/acbslurm")
    assert res.exit_code == 0, res.stderr  # warnings only: the node's disks may differ
    err = res.stderr
    assert (
        "Warning: mount source '/nowhere/x' does not exist here; the job fails at its start "
        "unless it exists on the node"
    ) in err
    assert f"Warning: env_file '{cwd}/gone.env' does not exist here" in err
    assert "data" not in err and "here.env" not in err
    assert len(fake_slurm.calls("sbatch")) == 1
