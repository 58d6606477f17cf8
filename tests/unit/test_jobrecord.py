import json
import os
import stat
from pathlib import Path

import pytest

from acbslurm.errors import ConfigError
from acbslurm.gpuvalue import Gpu, from_lists
from acbslurm.jobrecord import (
    RECORD_VERSION,
    JobRecord,
    read_record,
    remove_record,
    write_record,
)


def test_roundtrip_mode_and_atomic(tmp_path: Path) -> None:
    d = tmp_path / "jobs"
    rec = JobRecord("42", "user1", 1001, "n1", from_lists("n1", [1], ["GPU-b"], [1]), 2, 2048, 1.5)
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
    rec = JobRecord("42", "user1", 1001, "n1", from_lists("n1", [0, 1], ["GPU-a", "GPU-b"], [0, 1]))
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


def test_a_record_of_the_release_before_versions_is_read(tmp_path: Path) -> None:
    """A node upgraded while a job runs: `acbslurm run` reads what the old prolog wrote
    (three parallel lists, no version), not a missing or wrong set of GPUs."""
    old = {
        "job_id": "8",
        "user": "user1",
        "uid": 1001,
        "node": "n1",
        "gpu_indices": [0, 2],
        "gpu_uuids": ["GPU-a", "GPU-c"],
        "gpu_minors": [0, 2],
        "cpus": 2,
        "mem_mb": 1024,
        "created": 1.0,
        "alloc_error": "",
        "docker_socket": True,
    }
    (tmp_path / "8.json").write_text(json.dumps(old))
    rec = read_record(str(tmp_path), "8")
    assert rec is not None
    assert rec.gpus == (Gpu("GPU-a", 0, 0, "n1"), Gpu("GPU-c", 2, 2, "n1"))
    assert (rec.cpus, rec.mem_mb) == (2, 1024)
    # Slurm named UUIDs: no indices; an old record with fewer minors keeps the UUIDs.
    old.update(gpu_indices=[], gpu_minors=[])
    (tmp_path / "8.json").write_text(json.dumps(old))
    rec = read_record(str(tmp_path), "8")
    assert rec is not None and rec.gpus == (Gpu("GPU-a", node="n1"), Gpu("GPU-c", node="n1"))
    old.update(gpu_indices=[0])
    (tmp_path / "8.json").write_text(json.dumps(old))
    with pytest.raises(ConfigError, match=r"8.json is invalid \(1 GPU indices for 2 UUIDs\)"):
        read_record(str(tmp_path), "8")


def test_what_is_written_is_versioned_and_read_back_whole(tmp_path: Path) -> None:
    gpus = (Gpu("GPU-a", 1, 1, "n1"), Gpu("MIG-b", None, 3, "n1"))
    rec = JobRecord("9", "user1", 1001, "n1", gpus, 4, 512)
    write_record(str(tmp_path), rec)
    on_disk = json.loads((tmp_path / "9.json").read_text())
    assert on_disk["version"] == RECORD_VERSION == 2
    assert on_disk["gpus"][1] == {"node": "n1", "index": None, "minor": 3, "uuid": "MIG-b"}
    assert read_record(str(tmp_path), "9") == rec


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"version": 3},
            r"was written by a newer acbslurm \(record version 3; this one reads up to 2\)",
        ),
        ({"version": "2"}, r"is invalid \(version '2'\)"),
        ({"gpus": {"uuid": "GPU-a"}}, r"is invalid \(gpus is not a list\)"),
        ({"gpus": [{"index": 0}]}, r"is invalid \('uuid'\)"),
        (
            {"gpus": [{"uuid": "GPU-a", "index": "0"}]},
            r"is invalid \(GPU index '0' is not a number\)",
        ),
        (
            {"gpus": [{"uuid": "GPU-a", "minor": -1}]},
            r"is invalid \(GPU minor -1 is not a number\)",
        ),
        ({"gpus": ["GPU-a"]}, r"is invalid \(a GPU is an object, not str\)"),
    ],
)
def test_a_record_acbslurm_cannot_read_is_refused_by_name(
    tmp_path: Path, change: dict[str, object], message: str
) -> None:
    """A later release's record (a node downgraded under a running job) or a damaged one
    gives no GPUs: `acbslurm run` says why instead of guessing."""
    data = {"version": 2, "job_id": "9", "user": "u", "uid": 1, "node": "n", "gpus": []}
    data.update(change)
    (tmp_path / "9.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=r"9.json " + message):
        read_record(str(tmp_path), "9")
