"""Finding, checking and caching Slurm release sources (no build runs here)."""

import hashlib
import json
from pathlib import Path

import pytest

from acbslurm.errors import SetupError
from acbslurm.sandbox import slurmbuild
from acbslurm.slurm.versions import SlurmInstall


@pytest.fixture
def sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "src"
    d.mkdir()
    tar = d / "slurm-25.11.7.tar.bz2"
    tar.write_bytes(b"not really a tarball")
    digest = hashlib.sha256(tar.read_bytes()).hexdigest()
    (d / "SHA256SUMS").write_text(f"{digest}  slurm-25.11.7.tar.bz2\n")
    monkeypatch.setenv(slurmbuild.SOURCES_ENV, str(d))
    monkeypatch.setenv(slurmbuild.CACHE_ENV, str(tmp_path / "cache"))
    return d


def test_no_source_is_one_clear_error_naming_where_to_get_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(slurmbuild.SOURCES_ENV, raising=False)
    with pytest.raises(SetupError) as exc:
        slurmbuild.find_source("24.11.7")
    msg = str(exc.value)
    assert "no source for Slurm 24.11.7" in msg
    assert "ACBSLURM_SLURM_SOURCES is not set" in msg
    assert "--slurm-source" in msg and "download.schedmd.com" in msg


def test_the_source_is_found_and_its_hash_checked(sources: Path) -> None:
    tar = slurmbuild.find_source("25.11.7")
    assert tar == sources / "slurm-25.11.7.tar.bz2"
    assert slurmbuild.checked_sha256(tar) == hashlib.sha256(tar.read_bytes()).hexdigest()
    tar.write_bytes(b"tampered")
    with pytest.raises(SetupError, match="does not match SHA256SUMS"):
        slurmbuild.checked_sha256(tar)
    with pytest.raises(SetupError, match=r"looked for .*slurm-23\.11\.11\.tar\.bz2"):
        slurmbuild.find_source("23.11.11")


def test_a_complete_cached_build_is_reused(sources: Path, tmp_path: Path) -> None:
    tar = sources / "slurm-25.11.7.tar.bz2"
    sha = slurmbuild.checked_sha256(tar)
    entry = tmp_path / "cache" / slurmbuild.cache_key("25.11.7", sha)
    (entry / "prefix").mkdir(parents=True)
    assert slurmbuild.built("25.11.7", sha) is None  # no stamp: a build was cut short
    (entry / "build.json").write_text(json.dumps({"release": "25.11.7"}))
    got = slurmbuild.ensure_built("25.11.7", None, print)
    assert got == SlurmInstall(prefix=str(entry / "prefix"), release="25.11.7")


def test_choose_install(sources: Path) -> None:
    assert slurmbuild.choose_install(None, None, None, print) is None
    assert slurmbuild.choose_install("debian", None, None, print) == SlurmInstall()
    assert slurmbuild.choose_install("22.05.8", None, None, print) == SlurmInstall()
    with pytest.raises(SetupError, match=r"slurm-VERSION\.tar\.bz2"):
        slurmbuild.choose_install(None, None, str(sources / "SHA256SUMS"), print)
    with pytest.raises(ValueError, match="not a Slurm release"):
        slurmbuild.choose_install("latest", None, None, print)
