"""`sandbox up --docker`: the offered releases, the cache lookup, the daemon's config and
the CDI spec of the emulated GPUs (nothing fetched or started here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from acbslurm.cli.main import cli
from acbslurm.errors import SetupError
from acbslurm.gpu.inventory import GpuInfo
from acbslurm.sandbox import docker, dockerbuild, gpus
from acbslurm.sandbox.dockerversions import OFFERED, DockerInstall
from acbslurm.sandbox.layout import Layout, Params


def test_a_version_not_offered_is_exit_2_naming_the_offered() -> None:
    res = CliRunner().invoke(cli, ["sandbox", "up", "--docker", "27.0"])
    assert res.exit_code == 2
    assert "Docker 27.0 is not offered; offered: 20.10, 26.1, 28.5" in res.output
    res = CliRunner().invoke(cli, ["sandbox", "up"], env={"ACBSLURM_SANDBOX_DOCKER": "29"})
    assert res.exit_code == 2 and "offered: 20.10, 26.1, 28.5" in res.output


def test_the_host_docker_needs_no_fetch() -> None:
    assert dockerbuild.ensure_fetched("20.10", print) == DockerInstall()
    with pytest.raises(SetupError, match=r"offered: 20\.10, 26\.1, 28\.5"):
        dockerbuild.release_of("24.0")


def test_a_complete_cache_entry_is_found_without_network(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(dockerbuild.CACHE_ENV, str(tmp_path))
    entry = tmp_path / "28.5" / "0123456789abcdef"
    (entry / "prefix").mkdir(parents=True)
    assert dockerbuild.fetched("28.5") is None  # no manifest yet: still being fetched
    pkgs = [{"name": n, "version": v, "sha256": "0" * 64} for n, v in OFFERED["28.5"].packages]
    (entry / "manifest.json").write_text(json.dumps({"packages": pkgs}))
    got = dockerbuild.ensure_fetched("28.5", print)
    assert got == DockerInstall("28.5", str(entry / "prefix"))
    assert got.cli == f"{entry}/prefix/usr/bin/docker"
    assert got.path_dirs == [f"{entry}/prefix/usr/bin", f"{entry}/prefix/usr/sbin"]
    # other pinned versions (an older pin list): not this release's
    pkgs[0]["version"] = "28.5.1"
    (entry / "manifest.json").write_text(json.dumps({"packages": pkgs}))
    assert dockerbuild.fetched("28.5") is None


def _layout(tmp_path: Path, version: str, prefix: str = "") -> Layout:
    lay = Layout(tmp_path)
    lay.etc.mkdir(parents=True)
    lay.save_params(Params(node="n1", docker_version=version, docker_prefix=prefix))
    return lay


def test_daemon_config_per_version(tmp_path: Path) -> None:
    lay = _layout(tmp_path, "26.1", "/c/26.1/k/prefix")
    argv = docker.daemon_argv(lay, "user1")
    assert argv[0] == "/c/26.1/k/prefix/usr/share/docker.io/contrib/dockerd-rootless.sh"
    assert f"--config-file={lay.docker_config('user1')}" in argv
    conf = json.loads(lay.docker_config("user1").read_text())
    assert conf == {"cdi-spec-dirs": [str(lay.cdi_dir)], "features": {"cdi": True}}
    lay.save_params(Params(node="n1", docker_version="28.5", docker_prefix="/p"))
    docker.daemon_argv(lay, "user1")
    assert "features" not in json.loads(lay.docker_config("user1").read_text())  # 28.2+: on


def test_the_host_docker_is_started_as_before(tmp_path: Path) -> None:
    lay = _layout(tmp_path, "20.10")
    argv = docker.daemon_argv(lay, "user1")
    assert argv[0] == "/usr/share/docker.io/contrib/dockerd-rootless.sh"
    assert not any(a.startswith("--config-file") for a in argv)
    assert Params().docker == DockerInstall()  # old sandbox.json files: the host's


def test_cdi_spec_names_each_gpu_by_uuid_with_its_node_and_env() -> None:
    g = [GpuInfo(index=i, minor=i, uuid=f"GPU-{i}", device=f"/sb/dev/nvidia{i}") for i in (0, 1)]
    spec = gpus.cdi_spec(g, "/sb/bin/nvidia-container-runtime-hook")
    assert (spec["cdiVersion"], spec["kind"]) == ("0.5.0", "nvidia.com/gpu")
    dev = spec["devices"][1]  # type: ignore[index]
    assert dev["name"] == "GPU-1"
    assert dev["containerEdits"]["deviceNodes"] == [{"path": "/sb/dev/nvidia1"}]
    assert dev["containerEdits"]["mounts"][0]["containerPath"] == "/dev/nvidia1"
    assert dev["containerEdits"]["env"] == ["SANDBOX_CDI_GPU1=GPU-1"]
    (hook,) = spec["containerEdits"]["hooks"]  # type: ignore[index]
    assert hook["args"] == ["nvidia-container-runtime-hook", "cdi"]
