"""slurm_backend: auto | cli | pyslurm, checked without importing pyslurm."""

from pathlib import Path

import pytest
from fake_slurm import FakeSlurm

from acbslurm.errors import ConfigError
from acbslurm.slurm import backend


def test_cli_is_always_cli_and_unknown_names_are_refused() -> None:
    assert backend.choose_backend("cli", "/nonexistent") == "cli"
    with pytest.raises(ConfigError, match="auto, cli, pyslurm"):
        backend.choose_backend("rest", "/nonexistent")


def test_no_readable_slurm_conf_means_no_pyslurm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_CONF", raising=False)
    assert "no readable slurm.conf at /nonexistent" in backend.pyslurm_problem("/nonexistent")
    assert backend.choose_backend("auto", "/nonexistent") == "cli"
    with pytest.raises(ConfigError, match="slurm_backend is pyslurm, but no readable"):
        backend.choose_backend("pyslurm", "/nonexistent")


def test_pyslurm_must_match_the_running_release(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_slurm: FakeSlurm
) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=c\n")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    monkeypatch.setattr(backend, "pyslurm_version", lambda: "")
    assert "not installed" in backend.pyslurm_problem("/unused")
    monkeypatch.setattr(backend, "pyslurm_version", lambda: "25.11.2")
    monkeypatch.setattr(backend, "running_release", lambda env=None: "22.05.8")
    assert backend.pyslurm_problem("/unused") == (
        "pyslurm 25.11.2 is not built for the running Slurm 22.05.8"
    )
    assert backend.choose_backend("auto", "/unused") == "cli"
    monkeypatch.setattr(backend, "running_release", lambda env=None: "25.11.7")
    assert backend.choose_backend("auto", "/unused") == "pyslurm"
