import os
import stat
from pathlib import Path

import pytest

from acbslurm.errors import ConfigError
from acbslurm.jobrecord import JobRecord, read_record, remove_record, write_record


def test_roundtrip_mode_and_atomic(tmp_path: Path) -> None:
    d = tmp_path / "jobs"
    rec = JobRecord("42", "user1", 1001, "n1", [1], ["GPU-b"], [1], 2, 2048, 1.5)
    path = write_record(str(d), rec)
    assert path == str(d / "42.json")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
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


def test_trusted_record_needs_root_owned_file_and_dir(tmp_path: Path) -> None:
    """A user who points record_dir at a directory of their own gets no GPUs from it."""
    import os

    from acbslurm.jobrecord import read_trusted_record

    d = tmp_path / "jobs"
    rec = JobRecord("42", "user1", 1001, "n1", [0, 1], ["GPU-a", "GPU-b"], [0, 1])
    write_record(str(d), rec)
    assert read_trusted_record(str(d), "42") == rec  # the tests run as root (CI does)
    assert read_trusted_record(str(d), "43") is None
    assert read_trusted_record(str(tmp_path / "missing"), "42") is None

    d.chmod(0o777)
    with pytest.raises(ConfigError, match="not root-owned and writable by root alone"):
        read_trusted_record(str(d), "42")
    d.chmod(0o755)

    (d / "42.json").chmod(0o666)
    with pytest.raises(ConfigError, match=r"42.json is not root-owned"):
        read_trusted_record(str(d), "42")
    (d / "42.json").chmod(0o644)

    os.chown(d / "42.json", 1001, 1001)
    with pytest.raises(ConfigError, match=r"42.json is not root-owned"):
        read_trusted_record(str(d), "42")
    os.chown(d / "42.json", 0, 0)

    # another job's record under this job's name, or a symlink to one, is refused
    (d / "43.json").symlink_to(d / "42.json")
    with pytest.raises(ConfigError, match="unreadable"):
        read_trusted_record(str(d), "43")
    (d / "43.json").unlink()
    (d / "43.json").write_text((d / "42.json").read_text())
    with pytest.raises(ConfigError, match="is for job '42', not '43'"):
        read_trusted_record(str(d), "43")


def test_a_full_disk_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    def full(_fd: int, _data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError, match="No space left") as exc:
        write_record(str(tmp_path), JobRecord(job_id="5", user="u", uid=1, node="n"))
    assert os.listdir(tmp_path) == []
    # The prolog's message says where (os.write's error names no file).
    assert str(exc.value).endswith(f"No space left on device: '{tmp_path}/.5.{os.getpid()}.tmp'")
