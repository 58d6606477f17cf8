"""gres.conf against the inventory; the NVIDIA container hook."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import UUIDS, hook_script

from acbslurm.doctor import gres, nvidia, slurmconf
from acbslurm.doctor.context import Context
from acbslurm.gpu.inventory import GpuInfo, write_static


def _gres(ctx: Context) -> tuple[str, str]:
    c = gres.check_gres(ctx, slurmconf.load(ctx))
    return c.status, c.summary


def test_gres_matches_the_inventory(node: Path, make_ctx: Callable[..., Context]) -> None:
    status, summary = _gres(make_ctx())
    assert status == "ok", summary
    # index 0 -> nvidia0 -> minor 0 -> the inventory's GPU with minor 0 (NVML index 1)
    assert f"0 -> {node}/dev/nvidia0 (minor 0) -> {UUIDS[0]}" in summary
    assert f"1 -> {node}/dev/nvidia1 (minor 1) -> {UUIDS[1]}" in summary


def test_autodetect_nvml_maps_by_minor(node: Path, make_ctx: Callable[..., Context]) -> None:
    inv = [
        GpuInfo(index=i, minor=1 - i, uuid=UUIDS[1 - i], device=f"{node}/dev/nvidia{1 - i}")
        for i in range(2)
    ]
    write_static(node / "gpus.json", inv)
    (node / "gres.conf").write_text("AutoDetect=nvml\n")
    status, summary = _gres(make_ctx())
    assert status == "ok" and "(AutoDetect=nvml)" in summary
    assert f"0 -> {node}/dev/nvidia0 (minor 0) -> {UUIDS[0]}" in summary


@pytest.mark.parametrize(
    ("gres_conf", "slurm_gres", "problem"),
    [
        # a device file whose minor number no GPU has
        ("Name=gpu File={dev}/nvidia[1-2]", "gpu:2", "index 1 -> {dev}/nvidia2 (minor 2): no GPU"),
        ("Name=gpu File={dev}/nvidia9", "gpu:1", "{dev}/nvidia9 (from gres.conf): No such file"),
        ("Name=gpu File={dev}/nvidia0", "gpu:2", "Gres=gpu:2 but gres.conf has 1 GPU device"),
        ("Name=gpu Count=2", "gpu:2", "lists no GPU device files"),
        ("Name=gpu File={dev}/nvidia0,{dev}/nvidia0", "gpu:2", "a device file is listed twice"),
    ],
)
def test_gres_failures_are_named(
    node: Path, make_ctx: Callable[..., Context], gres_conf: str, slurm_gres: str, problem: str
) -> None:
    dev = node / "dev"
    (node / "gres.conf").write_text(gres_conf.format(dev=dev) + "\n")
    text = (node / "slurm.conf").read_text().replace("Gres=gpu:h200:2", f"Gres={slurm_gres}")
    (node / "slurm.conf").write_text(text)
    status, summary = _gres(make_ctx())
    assert status == "fail"
    assert problem.format(dev=dev) in summary


def test_bad_inventory_uuids(node: Path, make_ctx: Callable[..., Context]) -> None:
    write_static(
        node / "gpus.json",
        [GpuInfo(index=0, minor=0, uuid="GPU-bad"), GpuInfo(index=1, minor=1, uuid="GPU-bad")],
    )
    status, summary = _gres(make_ctx())
    assert status == "fail"
    assert "malformed UUIDs GPU-bad" in summary and "UUIDs listed twice: GPU-bad" in summary


def test_fewer_gres_gpus_than_the_node_has_is_a_warning(
    node: Path, make_ctx: Callable[..., Context]
) -> None:
    (node / "gres.conf").write_text(f"Name=gpu File={node}/dev/nvidia0\n")
    text = (node / "slurm.conf").read_text().replace("gpu:h200:2", "gpu:1")
    (node / "slurm.conf").write_text(text)
    assert _gres(make_ctx())[0] == "warn"


def test_no_nvml(make_ctx: Callable[..., Context], monkeypatch: pytest.MonkeyPatch) -> None:
    from acbslurm.errors import SetupError
    from acbslurm.gpu import nvml

    def no_driver() -> list[GpuInfo]:
        raise SetupError("NVML cannot start (Driver Not Loaded)")

    monkeypatch.setattr(nvml, "nvml_inventory", no_driver)
    c = gres.check_gres(make_ctx(gpu_inventory=""), None)
    assert c.status == "fail" and "NVML cannot start" in c.summary
    assert c.fix.startswith("install the NVIDIA driver")


# -- the NVIDIA hook ------------------------------------------------------------------


def _fake_dockerd(
    proc: Path, uid: int, env: dict[str, str], pid: int = 4242, argv: tuple[str, ...] = ()
) -> None:
    d = proc / str(pid)
    d.mkdir(parents=True)
    (d / "status").write_text(f"Name:\tdockerd\nUmask:\t0022\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    (d / "environ").write_bytes(b"\0".join(f"{k}={v}".encode() for k, v in env.items()) + b"\0")
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in ("dockerd", *argv)) + b"\0")


REAL_HOOK = "#!/bin/true\n# ELF stand-in for NVIDIA's binary\n"
STANDIN = "#!/usr/bin/python3 -I\n# SANDBOX-ONLY stand-in for NVIDIA's hook\n"


@pytest.fixture
def daemon_bin(tmp_path: Path, node: Path) -> Path:
    b = tmp_path / "daemon-bin"
    b.mkdir()
    # user1's daemon at the site's docker_host, by its default socket
    env = {"PATH": f"{b}:/usr/bin", "XDG_RUNTIME_DIR": f"{node}/run/user1"}
    _fake_dockerd(tmp_path / "proc", 1001, env, pid=4545)
    # another daemon of user1 (a second sandbox), listening elsewhere
    other = ("--data-root=/x", "-H", f"unix://{tmp_path}/other.sock")
    _fake_dockerd(tmp_path / "proc", 1001, {"PATH": "/nowhere"}, pid=4242, argv=other)
    _fake_dockerd(tmp_path / "proc", 1002, {"PATH": "/nowhere"}, pid=4343)  # not our user's
    return b


def test_hook_on_the_daemons_path_with_no_cgroups(
    tmp_path: Path, daemon_bin: Path, make_ctx: Callable[..., Context]
) -> None:
    hook_script(daemon_bin / nvidia.HOOK, REAL_HOOK)
    config = tmp_path / "config.toml"
    config.write_text("[nvidia-container-cli]\nno-cgroups = true\n")
    c = nvidia.check_nvidia_hook(make_ctx(), str(tmp_path / "proc"), str(config))
    assert c.status == "ok" and "user1's running dockerd" in c.summary, c
    config.write_text("[nvidia-container-cli]\nno-cgroups = false\n")
    c = nvidia.check_nvidia_hook(make_ctx(), str(tmp_path / "proc"), str(config))
    assert c.status == "fail" and "does not set no-cgroups = true" in c.summary
    c = nvidia.check_nvidia_hook(make_ctx(), str(tmp_path / "proc"), str(tmp_path / "none"))
    assert c.status == "fail" and "does not exist" in c.summary


def test_no_hook_on_the_daemons_path(
    tmp_path: Path, daemon_bin: Path, make_ctx: Callable[..., Context]
) -> None:
    c = nvidia.check_nvidia_hook(make_ctx(), str(tmp_path / "proc"))
    assert c.status == "fail" and "is not on the PATH of user1's running dockerd" in c.summary
    assert "nvidia-container-toolkit" in c.fix
    assert daemon_bin.is_dir()


def test_the_sandbox_standin(
    tmp_path: Path, daemon_bin: Path, make_ctx: Callable[..., Context]
) -> None:
    hook_script(daemon_bin / nvidia.HOOK, STANDIN)
    proc = str(tmp_path / "proc")
    assert nvidia.check_nvidia_hook(make_ctx(), proc).status == "ok"  # static inventory
    c = nvidia.check_nvidia_hook(make_ctx(gpu_inventory=""), proc)
    assert c.status == "fail" and "the sandbox's stand-in" in c.summary


def test_without_a_daemon_the_standard_path_is_searched(
    tmp_path: Path, make_ctx: Callable[..., Context]
) -> None:
    b = tmp_path / "bin"
    b.mkdir()
    hook_script(b / nvidia.HOOK, STANDIN)
    (tmp_path / "proc").mkdir()
    c = nvidia.check_nvidia_hook(make_ctx(env={"PATH": str(b)}), str(tmp_path / "proc"))
    assert c.status == "ok" and "no running dockerd of user1 at " in c.summary


def test_another_daemon_of_the_user_is_not_this_nodes(
    tmp_path: Path, node: Path, make_ctx: Callable[..., Context]
) -> None:
    # A second sandbox's user1 daemon (another socket) has the hook on its PATH, while
    # the daemon this node's docker_host names is down: not an ok about the wrong one.
    b = tmp_path / "other-bin"
    b.mkdir()
    hook_script(b / nvidia.HOOK, STANDIN)
    other = ("-H", f"unix://{tmp_path}/other.sock")
    _fake_dockerd(tmp_path / "proc", 1001, {"PATH": str(b)}, pid=4242, argv=other)
    c = nvidia.check_nvidia_hook(make_ctx(), str(tmp_path / "proc"))
    assert c.status == "fail", c
    assert f"no running dockerd of user1 at {node}/run/user1/docker.sock" in c.summary


def test_root_without_user_is_skipped_as_dockerd_is(
    tmp_path: Path, daemon_bin: Path, make_ctx: Callable[..., Context]
) -> None:
    hook_script(daemon_bin / nvidia.HOOK, STANDIN)
    ctx = make_ctx(uid=0, user="root", caller_uid=0)
    c = nvidia.check_nvidia_hook(ctx, str(tmp_path / "proc"))
    assert c.status == "skip" and "root has no rootless daemon" in c.summary


def test_several_nodes_on_this_host_ask_for_the_node_option(
    node: Path, make_ctx: Callable[..., Context]
) -> None:
    # The sandbox's --nodes 2: two slurmd on 127.0.0.1, neither named after the host.
    (node / "slurm.conf").write_text(
        "PrologFlags=Alloc\nNodeName=vm-[1-2] NodeAddr=127.0.0.1 Gres=gpu:2\n"
    )
    status, summary = _gres(make_ctx())
    assert status == "fail" and "several nodes share this host (vm-1, vm-2)" in summary
    c = gres.check_gres(make_ctx(), slurmconf.load(make_ctx()))
    assert "--node NAME" in c.fix and "gres.conf" not in c.fix
    (node / "slurm.conf").write_text("NodeName=far Gres=gpu:2\n")
    status, summary = _gres(make_ctx())
    assert status == "fail" and "slurm.conf has no node n1 (it has far)" in summary
