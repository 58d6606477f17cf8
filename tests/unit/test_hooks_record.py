import stat
from pathlib import Path

import pytest

from acbslurm.errors import ConfigError
from acbslurm.hooks.record import JobRecord, read_record, remove_record, write_record


def test_roundtrip_mode_and_atomic(tmp_path: Path) -> None:
    d = tmp_path / "jobs"
    rec = JobRecord("42", "user1", 1001, "n1", [1], ["GPU-b"], [1], 2, 2048, 1.5)
    path = write_record(str(d), rec)
    assert path == d / "42.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in d.iterdir()] == ["42.json"]  # no temp file left
    assert read_record(str(d), "42") == rec
    assert remove_record(str(d), "42") is True
    assert read_record(str(d), "42") is None
    assert remove_record(str(d), "42") is False


@pytest.mark.parametrize("bad", ["", "../etc/passwd", "12;rm", "1 2"])
def test_job_id_must_be_numeric(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ConfigError, match="invalid Slurm job id"):
        read_record(str(tmp_path), bad)


def test_invalid_record_is_reported(tmp_path: Path) -> None:
    (tmp_path / "7.json").write_text('{"job_id": "7"}')
    with pytest.raises(ConfigError, match=r"7.json is invalid"):
        read_record(str(tmp_path), "7")
