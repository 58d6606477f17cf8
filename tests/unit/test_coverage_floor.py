"""The coverage floor only rises: the Makefile's ``COV_FLOOR`` is at least every value it
has had in the repository's history (a floor lowered to let a change through would fail
here). Skipped where the checkout has no history (an unpacked release)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FLOOR = re.compile(r"^[-+]?COV_FLOOR \?= ([0-9]+(?:\.[0-9]+)?)\s*$", re.MULTILINE)


def floors_in_history() -> list[float]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("no git history here")
    done = subprocess.run(
        ["git", "-C", str(ROOT), "log", "--format=", "-p", "--", "Makefile"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"git log failed: {done.stderr.strip()[:200]}")
    return [float(v) for v in FLOOR.findall(done.stdout)]


def test_the_coverage_floor_never_goes_down() -> None:
    now = FLOOR.findall((ROOT / "Makefile").read_text())
    assert len(now) == 1, "the Makefile sets COV_FLOOR once"
    past = floors_in_history()
    assert past, "no COV_FLOOR in the Makefile's history"
    assert float(now[0]) >= max(past), (
        f"COV_FLOOR {now[0]} is below {max(past):g}, a floor it had before: it only rises"
    )
