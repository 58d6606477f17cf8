"""ASCII digits only, everywhere: ``²``, ``٢`` or the Kelvin sign are never numbers.

``str.isdigit()``, ``\\d`` and ``re.IGNORECASE`` without ``re.ASCII`` accept characters
that ``int()`` then rejects (a traceback) or that Slurm misreads on an ``#SBATCH`` line.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from starlette.requests import Request

from acbslurm import units
from acbslurm.doctor import version as doctor_version
from acbslurm.doctor.report import _db_address
from acbslurm.errors import SpecError
from acbslurm.serve.gateway import ApiError, Gateway
from acbslurm.slurm import versions
from acbslurm.slurm.dbdconfig import parse_private_data
from acbslurm.slurm.jobtypes import exit_status
from acbslurm.spec import parse_spec

PACKAGE = Path(__file__).resolve().parents[2] / "acbslurm"
KELVIN = "\u212a"  # K, which re.IGNORECASE folds to k
ARABIC = {ord(d): 0x0660 + int(d) for d in "0123456789"}  # Arabic-Indic digits


def arabic(text: str) -> str:
    return text.translate(ARABIC)


ARABIC_2 = arabic("2")
SIZES = [f"2{KELVIN}", f"2{KELVIN}B", f"2{KELVIN}iB", f"{ARABIC_2}G", "2²"]


def test_the_package_uses_no_unicode_digit_tests() -> None:
    """``\\d`` in a regex and ``isdigit``/``isdecimal``/``isnumeric`` stay out (units.py's
    ``is_ascii_int`` is the one place, and lines that check ``isascii()`` themselves)."""
    digit_class = re.compile(r"(?<!\\)\\d")
    unicode_test = re.compile(r"(?<!``str)\.(isdigit|isdecimal|isnumeric)\(")
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "_generated" in path.parts:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            where = f"{path.relative_to(PACKAGE.parent)}:{n}: {line.strip()}"
            if digit_class.search(line):
                found.append(where)
            if unicode_test.search(line) and "isascii()" not in line:
                found.append(where)
    assert found == []


def test_the_package_compiles_no_case_blind_regex_without_ascii() -> None:
    """``re.IGNORECASE`` alone folds the Kelvin sign into ``k``."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        for m in re.finditer(r"re\.(?:I|IGNORECASE)\b[^)\n]*", text):
            if "re.ASCII" not in m.group(0) and "re.A " not in m.group(0) + " ":
                found.append(f"{path.relative_to(PACKAGE.parent)}: {m.group(0)}")
    assert found == []


@pytest.mark.parametrize("text", SIZES)
def test_sizes_refuse_the_kelvin_sign_and_other_digits(text: str) -> None:
    with pytest.raises(ValueError, match="is not"):
        units.size_bytes(text)
    with pytest.raises(ValueError, match="is not"):
        units.slurm_mem(text)


@pytest.mark.parametrize("text", [ARABIC_2, arabic("1.5"), "1_000", "²"])
def test_finite_float_reads_ascii_only(text: str) -> None:
    with pytest.raises(ValueError, match="is not a number"):
        units.finite_float(text)


def test_slurm_releases_are_ascii() -> None:
    with pytest.raises(ValueError, match="not a Slurm release"):
        versions.parse_release(arabic("25.11.7"))
    assert doctor_version._version("slurm " + arabic("25.11.7")) is None


def test_private_data_ignores_a_release_in_other_digits() -> None:
    show = f"SLURM_VERSION = {arabic('26.05.3')}\nSlurmDBD configuration\nPrivateData = none\n"
    assert parse_private_data(show) == "none"


@pytest.mark.parametrize(
    ("text", "expected"), [("0:15", (0, 15)), ("²:0", (None, 0)), ("1:" + arabic("9"), (1, None))]
)
def test_exit_status_reads_ascii_digits(text: str, expected: tuple[int | None, ...]) -> None:
    assert exit_status(text) == expected


def test_a_mysql_port_in_other_digits_falls_back_to_3306() -> None:
    assert _db_address("[client]\nhost = db\nport = ²\n") == ("db", 3306)


def test_the_gateway_reads_a_non_ascii_content_length_as_absent() -> None:
    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    scope = {
        "type": "http",
        "method": "POST",
        "headers": [(b"content-length", "²".encode("latin-1"))],
    }
    request = Request(scope, receive)
    assert asyncio.run(Gateway._read_json(request)) == {}
    big = [(b"content-length", str(1 << 30).encode())]
    with pytest.raises(ApiError, match="larger than"):
        asyncio.run(Gateway._read_json(Request({**scope, "headers": big}, receive)))


def test_a_pool_job_node_count_is_ascii() -> None:
    with pytest.raises(SpecError, match="fixed node count"):
        parse_spec(f"serve: pool.yaml\nnodes: '{ARABIC_2}'\n", "job.yaml")


def test_a_spec_memory_with_the_kelvin_sign_is_refused() -> None:
    with pytest.raises(SpecError, match="mem"):
        parse_spec(f"command: 'true'\nmem: 2{KELVIN}B\n", "job.yaml")
