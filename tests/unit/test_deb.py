"""The Debian package `make deb` builds: its control fields, its files and where they go
(dpkg-deb -f / -c on a package built once here, about 5 s). Installing it on a clean
Debian 12 is scripts/deb_chroot_check.sh; CI's second leg runs the sandbox on it."""

from __future__ import annotations

import configparser
import io
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import build_deb  # noqa: E402

pytestmark = pytest.mark.skipif(
    any(shutil.which(t) is None for t in ("dpkg-deb", *build_deb.BUILD_TOOLS)),
    reason="needs dpkg-deb, protoc and grpc_python_plugin (scripts/setup.sh installs them)",
)


@pytest.fixture(scope="module")
def deb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("deb")
    return build_deb.build(ROOT, out, "9.9.9")


def _field(deb: Path, name: str) -> str:
    return subprocess.run(
        ["dpkg-deb", "-f", str(deb), name], capture_output=True, text=True, check=True
    ).stdout.strip()


_TARS: dict[Path, bytes] = {}


def _tar(deb: Path) -> tarfile.TarFile:
    if deb not in _TARS:
        _TARS[deb] = subprocess.run(
            ["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True
        ).stdout
    return tarfile.open(fileobj=io.BytesIO(_TARS[deb]))


@pytest.fixture(scope="module")
def files(deb: Path) -> dict[str, tarfile.TarInfo]:
    with _tar(deb) as t:
        return {m.name.removeprefix("."): m for m in t.getmembers()}


def _read(deb: Path, path: str) -> str:
    with _tar(deb) as t:
        f = t.extractfile("." + path)
        assert f is not None
        return f.read().decode()


def test_control_fields(deb: Path) -> None:
    assert deb.name == "acbslurm_9.9.9_all.deb"
    assert _field(deb, "Package") == "acbslurm"
    assert _field(deb, "Architecture") == "all"
    depends = _field(deb, "Depends")
    for pkg in ("python3-mysqldb", "python3-click", "python3-jinja2", "python3-yaml"):
        assert pkg in depends
    for pkg in ("python3-grpcio", "python3-protobuf", "python3 (>= 3.11~)"):
        assert pkg in depends
    # Nothing that builds at install time.
    assert not any(w in depends for w in ("gcc", "-dev", "build-essential"))


def test_entry_points_are_setup_cfgs(deb: Path) -> None:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    scripts = {
        line.split("=")[0].strip(): line.split("=")[1].strip()
        for line in cfg["options.entry_points"]["console_scripts"].splitlines()
        if line.strip()
    }
    assert {Path(p).name: t for p, t in build_deb.ENTRY_POINTS.items()} == scripts


def test_files_where_packages_put_them(files: dict[str, tarfile.TarInfo]) -> None:
    for path in (
        "/usr/bin/acbslurm",
        "/usr/bin/agarun",
        "/usr/libexec/acbslurm/acbslurm-prolog",
        "/usr/libexec/acbslurm/acbslurm-epilog",
        "/usr/libexec/acbslurm/acbslurm-task-prolog",
        "/usr/libexec/acbslurm/acbslurm-runc",
    ):
        assert files[path].mode == 0o755, path
    for path in (
        "/etc/acbslurm/acbslurm.yaml",
        "/usr/lib/systemd/system/acbslurm-report.service",
        "/usr/lib/systemd/system/acbslurm-broker.service",
        "/usr/lib/tmpfiles.d/acbslurm.conf",
        "/usr/share/bash-completion/completions/acbslurm",
        "/usr/share/doc/acbslurm/copyright",
        "/usr/share/doc/acbslurm/slurm.conf.acbslurm",
        "/usr/share/doc/acbslurm/gres.conf.acbslurm",
        "/usr/share/doc/acbslurm/examples/sandbox-gpu.yaml",
        "/usr/lib/acbslurm/acbslurm/hooks/epilog.py",
        "/usr/lib/acbslurm/acbslurm/templates/sbatch.sh.j2",
        "/usr/lib/acbslurm/acbslurm/conf/systemd/acbslurm-report.service",
        "/usr/lib/acbslurm/vendor/pynvml.py",
    ):
        assert path in files and files[path].isfile(), path
    assert all(m.uname == "root" and m.gname == "root" for m in files.values())
    assert not [p for p in files if "__pycache__" in p or p.endswith(".pyc")]
    assert not [p for p, m in files.items() if m.mode & 0o022]  # writable by root alone


def test_conffile_and_maintainer_scripts(deb: Path, tmp_path: Path) -> None:
    subprocess.run(["dpkg-deb", "-e", str(deb), str(tmp_path / "c")], check=True)
    assert (tmp_path / "c/conffiles").read_text().split() == ["/etc/acbslurm/acbslurm.yaml"]
    for name in ("preinst", "postinst", "prerm", "postrm"):
        script = tmp_path / "c" / name
        subprocess.run(["sh", "-n", str(script)], check=True)
        # No systemctl call outside the guard Debian's helpers use.
        text = script.read_text()
        assert "systemctl" not in text or "[ -d /run/systemd/system ]" in text


def test_paths_are_the_packages(deb: Path, tmp_path: Path) -> None:
    from acbslurm.config import load_settings

    hook = _read(deb, "/usr/libexec/acbslurm/acbslurm-epilog")
    assert hook.startswith("#!/usr/bin/python3 -I\n")
    assert "from acbslurm.hooks.epilog import epilog_main" in hook
    conf = _read(deb, "/usr/share/doc/acbslurm/slurm.conf.acbslurm")
    assert "Epilog=/usr/libexec/acbslurm/acbslurm-epilog" in conf
    assert "/opt/acbslurm" not in conf
    unit = _read(deb, "/usr/lib/systemd/system/acbslurm-report.service")
    assert "ExecStart=/usr/bin/acbslurm report serve" in unit
    assert "PYTHONPATH='/usr/lib/acbslurm'" in _read(deb, "/usr/libexec/acbslurm/acbslurm-runc")
    assert "d /run/acbslurm 0755 root root" in _read(deb, "/usr/lib/tmpfiles.d/acbslurm.conf")
    settings = tmp_path / "acbslurm.yaml"
    settings.write_text(_read(deb, "/etc/acbslurm/acbslurm.yaml"))
    assert load_settings(str(settings)).node_acbslurm == "/usr/bin/acbslurm"


def test_hooks_wait_out_an_upgrade(deb: Path, tmp_path: Path) -> None:
    """From the new release's preinst to its postinst a hook would import modules of
    both releases: the entry scripts wait while the flag is there (bounded)."""
    subprocess.run(["dpkg-deb", "-e", str(deb), str(tmp_path / "c")], check=True)
    flag = build_deb.UPGRADE_FLAG
    assert f"touch {flag}" in (tmp_path / "c/preinst").read_text()
    assert f"rm -f {flag}" in (tmp_path / "c/postinst").read_text()
    assert f"rm -f {flag}" in (tmp_path / "c/postrm").read_text()  # abort-upgrade
    for path in build_deb.ENTRY_POINTS:
        text = _read(deb, "/" + path)
        assert text.index(flag) < text.index("sys.path.insert")
        compile(text, path, "exec")


def test_grpc_code_is_debians(deb: Path) -> None:
    """Generated for Debian's grpcio 1.51 and protobuf 3.21, which the checkout's code
    (grpcio 1.85, protobuf 7) refuses."""
    code = _read(deb, "/usr/lib/acbslurm/acbslurm/broker/_generated/broker_pb2_grpc.py")
    assert "GRPC_GENERATED_VERSION" not in code
    assert "from acbslurm.broker._generated import broker_pb2 as" in code
    assert "ValidateProtobufRuntimeVersion" not in _read(
        deb, "/usr/lib/acbslurm/acbslurm/broker/_generated/broker_pb2.py"
    )
