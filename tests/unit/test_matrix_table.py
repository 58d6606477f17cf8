"""scripts/matrix.py: a run of some releases keeps the other releases' rows, dates and all."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from scriptmodule import load

ROOT = Path(__file__).resolve().parents[2]

OLD_TABLE = """# Compatibility: acbslurm on each Slurm release

Written by `make matrix` on 2026-12-01 10:13 UTC on this project's

| Slurm | result | passed | failed | seconds | failing tests |
|---|---|---|---|---|---|
| 22.05.8 | pass | 36 | 0 | 276 | - |
| 23.02.8 | not run | | | | |
| 26.05.3 | FAIL | 35 | 1 | 240 | tests/a.py::test_x, tests/b.py::test_y |

## Upgrade path 22.05 -> 23.11 -> 25.11

| Slurm | schema | same numbers | jobs (gpus, gpu_seconds) | columns changed |
|---|---|---|---|---|
| 22.05.8 | 12 | True | 1: 1, 2 | job: 53 columns |
"""


@pytest.fixture
def matrix() -> ModuleType:
    return load(ROOT / "scripts" / "matrix.py", "matrix_script")


def test_rows_of_a_table_without_dates_get_the_date_it_was_written(matrix: ModuleType) -> None:
    rows = matrix.earlier_rows(OLD_TABLE)
    assert set(rows) == {"22.05.8", "26.05.3"}  # "not run" is no result; upgrade rows aren't
    assert rows["22.05.8"] == {
        "release": "22.05.8", "ok": True, "counts": {"passed": 36, "failed": 0},
        "failed": [], "seconds": 276, "date": "2026-12-01 10:13 UTC",
    }  # fmt: skip
    assert rows["26.05.3"]["ok"] is False
    assert rows["26.05.3"]["failed"] == ["tests/a.py::test_x", "tests/b.py::test_y"]


def test_a_subset_run_keeps_the_other_rows_and_their_dates(
    matrix: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "compatibility.md"
    monkeypatch.setattr(matrix, "OUT", out)
    new = {"release": "23.02.8", "ok": True, "counts": {"passed": 37}, "failed": [],
           "seconds": 300, "date": "2026-12-01 11:40 UTC"}  # fmt: skip
    merged = {**matrix.earlier_rows(OLD_TABLE), "23.02.8": new}
    matrix.write(list(merged.values()), (True, [], 30))
    again = matrix.earlier_rows(out.read_text())
    assert again["22.05.8"]["date"] == "2026-12-01 10:13 UTC"
    assert again["23.02.8"] == {**new, "counts": {"passed": 37, "failed": 0}}
    assert again["26.05.3"] == merged["26.05.3"]
    assert "| 24.11.7 | not run |" in out.read_text()


def test_the_hand_written_docker_section_is_kept(matrix: ModuleType) -> None:
    text = (
        "# C\n\n| 22.05.8 | pass | 1 | 0 | 2 | d | - |\n\n## Docker\n\nrows\n\n## Upgrade path x\n"
    )
    assert matrix.docker_section(text) == ["## Docker", "", "rows", ""]
    assert matrix.docker_section("# C\n\n## Upgrade path\n") == []
    assert "22.05.8" not in matrix.earlier_rows(text.replace("pass", "x"))
