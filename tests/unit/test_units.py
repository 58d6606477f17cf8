"""acbslurm/units.py: integers, finite numbers, sizes, ranges, time limits and instants."""

from __future__ import annotations

import time

import pytest

from acbslurm.units import (
    INSTANT_MAX,
    ascii_int,
    expand_ranges,
    finite_float,
    is_ascii_int,
    iso,
    mem_megabytes,
    parse_instant,
    parse_time_limit,
    size_bytes,
    slurm_mem,
    time_limit_seconds,
)

GIB = 1024**3


@pytest.mark.parametrize(("text", "want"), [("0", True), ("42", True), ("007", True)])
def test_ascii_digits_are_integers(text: str, want: bool) -> None:
    assert is_ascii_int(text) is want
    assert ascii_int(text) == int(text)


@pytest.mark.parametrize("text", ["", "-1", "+1", " 1", "1 ", "1.0", "1e3", "0x1", "one"])
def test_anything_else_is_not_an_integer(text: str) -> None:
    assert not is_ascii_int(text)
    with pytest.raises(ValueError, match="not a whole number"):
        ascii_int(text)


@pytest.mark.parametrize(("text", "want"), [("1.5", 1.5), (" -2 ", -2.0), ("1e3", 1000.0), (3, 3)])
def test_finite_floats(text: str | float, want: float) -> None:
    assert finite_float(text) == want


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "Infinity", float("nan"), float("inf")])
def test_non_finite_numbers_are_refused(text: str | float) -> None:
    with pytest.raises(ValueError, match="not a finite number"):
        finite_float(text)


def test_garbage_is_not_a_number() -> None:
    with pytest.raises(ValueError, match="'x' is not a number"):
        finite_float("x")


@pytest.mark.parametrize("text", ["2G", "2g", "2GB", "2gb", "2GiB", "2 G", " 2G "])
def test_one_meaning_of_a_gigabyte_binary(text: str) -> None:
    assert size_bytes(text) == 2 * GIB


@pytest.mark.parametrize(
    ("text", "unit", "want"),
    [
        ("512", "", 512),
        ("512", "M", 512 * 1024**2),
        ("1.5GiB", "", int(1.5 * GIB)),
        ("1K", "", 1024),
        ("1T", "", 1024**4),
        ("1P", "", 1024**5),
        (3, "G", 3 * GIB),
    ],
)
def test_sizes(text: str | int, unit: str, want: int) -> None:
    assert size_bytes(text, default_unit=unit) == want


@pytest.mark.parametrize("text", ["", "G", "-1G", "2X", "2GG", "1,5G", "2 GiBs", True])
def test_bad_sizes_say_what_a_size_is(text: str | bool) -> None:
    with pytest.raises(ValueError, match="a size such as"):
        size_bytes(text)  # type: ignore[arg-type]


def test_whole_sizes_and_negative_counts() -> None:
    with pytest.raises(ValueError, match="a size such as"):
        size_bytes("1.5G", whole=True)
    with pytest.raises(ValueError, match="must not be negative"):
        size_bytes(-1)


@pytest.mark.parametrize(
    ("value", "want"), [("2G", "2G"), ("2GB", "2G"), ("2GiB", "2G"), ("500m", "500M"), (64, "64")]
)
def test_slurm_mem_is_what_slurm_reads(value: object, want: str) -> None:
    assert slurm_mem(value) == want


@pytest.mark.parametrize("value", ["1.5G", "1P", "0", "0G", "lots", None, True, 2.0])
def test_slurm_mem_refuses_what_slurm_would_misread(value: object) -> None:
    with pytest.raises(ValueError):
        slurm_mem(value)


def test_megabytes_count_as_slurms_mem() -> None:
    assert mem_megabytes("500") == 500
    assert mem_megabytes("2G") == 2048
    assert mem_megabytes("512K") == 0.5


@pytest.mark.parametrize(
    ("text", "want"),
    [("0", [0]), ("0-1,4", [0, 1, 4]), ("3-3", [3]), ("0,,2", [0, 2]), ("", [])],
)
def test_ranges(text: str, want: list[int]) -> None:
    assert expand_ranges(text) == want


@pytest.mark.parametrize(("text", "words"), [("2-1", "runs backwards"), ("a", "whole number")])
def test_bad_ranges(text: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        expand_ranges(text)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30", 30 * 60),
        ("5:30", 5 * 60 + 30),
        ("2:00:00", 7200),
        ("1-0", 86400),
        ("1-02:03", 86400 + 2 * 3600 + 3 * 60),
        ("1-00:00:01", 86401),
        ("UNLIMITED", 0),
        ("infinite", 0),
    ],
)
def test_time_limits(text: str, seconds: int) -> None:
    assert time_limit_seconds(text) == seconds
    assert parse_time_limit(text) == ("UNLIMITED" if seconds == 0 else text)


def test_a_number_is_minutes() -> None:
    assert parse_time_limit(90) == "90"


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("1:60", "seconds must be below 60"),
        ("1-24", "hours must be below 24"),
        ("1:60:00", "minutes must be below 60"),
        ("0", "more than zero"),
        ("0:00:00", "more than zero"),
        ("1h", "a time limit such as"),
        ("-5", "a time limit such as"),
        (None, "a time limit such as"),
        (True, "a time limit such as"),
    ],
)
def test_bad_time_limits(value: object, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse_time_limit(value)


def test_instants() -> None:
    now = 1_800_000_000.0
    assert parse_instant("now", now) == 1_800_000_000
    assert parse_instant("now-7d", now) == 1_800_000_000 - 7 * 86400
    assert parse_instant("NOW-2h", now) == 1_800_000_000 - 7200
    assert parse_instant("@1700000000") == 1_700_000_000
    local = time.mktime((2026, 1, 31, 0, 0, 0, 0, 0, -1))
    assert parse_instant("2026-01-31") == int(local)
    assert parse_instant("2026-01-31T10:30") == int(local) + 10 * 3600 + 30 * 60
    assert parse_instant("2026-01-31 10:30:05") == int(local) + 10 * 3600 + 30 * 60 + 5


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("yesterday", "cannot read time"),
        ("now-7y", "cannot read time"),
        ("@-1", "cannot read time"),
        (f"@{INSTANT_MAX + 1}", "outside what slurmdbd records"),
    ],
)
def test_bad_instants(text: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse_instant(text)


def test_iso_is_local_time_with_its_offset() -> None:
    from datetime import datetime

    ts = 1_700_000_000
    assert iso(ts) == datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds")
    assert iso(0) is None and iso(None) is None
