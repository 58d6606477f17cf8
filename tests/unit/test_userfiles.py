"""userfiles: what acbslurm reads on a user's behalf is a regular file, read with a bound."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from acbslurm.errors import ConfigError, SpecError
from acbslurm.userfiles import MIB, read_user_file, read_user_text, size_text


def test_a_regular_file_is_read_whole(tmp_path: Path) -> None:
    f = tmp_path / "spec.yaml"
    f.write_bytes(b"x" * 1000)
    assert read_user_file(f, "job spec", limit=1000) == b"x" * 1000
    assert read_user_text(f, "job spec", limit=1000) == "x" * 1000


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/dev/zero", "a character device"),
        ("/dev/urandom", "a character device"),
        ("/tmp", "a directory"),
    ],
)
def test_what_is_not_a_regular_file_is_named(path: str, kind: str) -> None:
    with pytest.raises(SpecError, match=f"job spec '{path}' is {kind}, not a regular file"):
        read_user_file(path, "job spec", limit=MIB, error=SpecError)


def test_a_fifo_is_refused_at_once_with_no_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    done: list[BaseException] = []

    def read() -> None:
        try:
            read_user_file(fifo, "job spec", limit=MIB)
        except ConfigError as exc:
            done.append(exc)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "the read of a FIFO blocked"
    assert "is a FIFO (named pipe), not a regular file" in str(done[0])


def test_the_limit_is_named_and_exactly_the_limit_passes(tmp_path: Path) -> None:
    f = tmp_path / "pool.yaml"
    f.write_bytes(b"a" * (64 * 1024))
    assert len(read_user_file(f, "pool file", limit=64 * 1024)) == 64 * 1024
    f.write_bytes(b"a" * (64 * 1024 + 1))
    with pytest.raises(ConfigError, match=r"is larger than 64 KiB, the limit for a pool file"):
        read_user_file(f, "pool file", limit=64 * 1024)


def test_a_proc_file_whose_size_says_zero_is_still_bounded() -> None:
    # /proc/self/environ reports st_size 0; the read stops at limit + 1 all the same
    assert os.stat("/proc/self/environ").st_size == 0
    with pytest.raises(ConfigError, match="larger than 4 bytes"):
        read_user_file("/proc/self/environ", "settings file", limit=4)


def test_missing_is_left_to_the_caller_and_other_errors_are_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_user_file(tmp_path / "none", "job spec", limit=MIB)
    with pytest.raises(ConfigError, match="cannot be read"):
        read_user_file("/proc/self/mem", "job spec", limit=MIB)


def test_text_must_be_utf8(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_bytes(b"name: \xff\n")
    with pytest.raises(ConfigError, match=r"is not UTF-8 text \(byte 6"):
        read_user_text(f, "job spec", limit=MIB)


def test_sizes_read_as_users_write_them() -> None:
    assert (size_text(MIB), size_text(64 * 1024), size_text(1000)) == (
        "1 MiB",
        "64 KiB",
        "1000 bytes",
    )
