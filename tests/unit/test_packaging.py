"""The templates are found from a checkout and from a non-editable install."""

from __future__ import annotations

import configparser
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _declared_packages() -> set[str]:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    return {p.strip() for p in cfg["options"]["packages"].split() if p.strip()}


def test_every_package_folder_is_declared() -> None:
    found = {
        ".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "acbslurm").rglob("__init__.py")
    }
    declared = _declared_packages()
    assert found - declared == set(), "add these packages to setup.cfg"
    assert "acbslurm.templates" in declared


def test_templates_found_from_checkout() -> None:
    from acbslurm.resources import templates_dir

    assert (templates_dir() / "sandbox" / "slurm.conf.j2").is_file()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    return next(out.glob("acbslurm-*.whl"))


def test_wheel_ships_templates(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert "acbslurm/templates/sandbox/slurm.conf.j2" in names
    assert "acbslurm/templates/sandbox/nvidia-container-runtime-hook.py" in names
    templates = {n for n in names if n.startswith("acbslurm/templates/")}
    on_disk = {
        "acbslurm/templates/" + str(p.relative_to(ROOT / "templates"))
        for p in (ROOT / "templates").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert on_disk <= templates


def test_wheel_ships_conf(wheel: Path) -> None:
    """`acbslurm doctor` and the report's errors point pip users at the installed conf/."""
    names = zipfile.ZipFile(wheel).namelist()
    for f in (
        "systemd/acbslurm-report.service",
        "systemd/acbslurm-broker.service",
        "tmpfiles.d/acbslurm.conf",
        "slurm/slurm.conf.acbslurm",
        "slurm/gres.conf.acbslurm",
        "slurm/acbslurm.yaml.example",
        "report-db.example.cnf",
        "nvidia-container-toolkit/config.toml",
        "examples/sandbox-gpu.yaml",
    ):
        assert f"acbslurm/conf/{f}" in names


def test_wheel_is_typed(wheel: Path) -> None:
    """BrokerClient and the spec/render functions are a public API: type checkers of
    the programs that import them read acbslurm's annotations only with py.typed."""
    names = zipfile.ZipFile(wheel).namelist()
    assert "acbslurm/py.typed" in names
    assert "acbslurm/broker/_generated/broker_pb2.pyi" in names


def test_installed_copy_finds_its_own_templates(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    code = (
        "from acbslurm.resources import conf_dir, templates_dir; "
        "print(templates_dir()); print(conf_dir())"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(target)!r}); {code}"],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    ).stdout.split()
    assert out == [str(target / "acbslurm" / "templates"), str(target / "acbslurm" / "conf")]


def test_test_file_names_are_unique_across_folders() -> None:
    """`make test` collects tests/ in one run without __init__.py files: two test files
    of one name in two folders stop the whole run at collection ("import file mismatch"),
    which running the folders one at a time does not show."""
    from collections import Counter
    from pathlib import Path

    names = Counter(p.name for p in (Path(__file__).parents[1]).rglob("test_*.py"))
    assert [n for n, c in names.items() if c > 1] == []
