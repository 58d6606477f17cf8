"""docs/architecture.md draws what is there: its layer drawing is the import contract
that lint-imports holds (`[tool.importlinter]` in pyproject.toml), row for row, and
every top-level package and module of acbslurm is in the contract, in the drawing and
in the page's table. Packages only: the modules inside a package move more often than
the packages, and their own docstrings and pages name them."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
# A layer's line in the drawing: its names split by " | ", at the line's start, then
# (after two spaces or more) what they are; lines that start with a space carry on the
# description or draw the arrow.
ROW = re.compile(r"^([a-z_]+(?: \| [a-z_]+)*)(?: {2,}.*)?$")


def _top_level() -> set[str]:
    """acbslurm's packages and modules, but for the package's own entry points."""
    names = {p.name for p in (ROOT / "acbslurm").iterdir() if (p / "__init__.py").exists()}
    names |= {p.stem for p in (ROOT / "acbslurm").glob("*.py")}
    return names - {"__init__", "__main__"}


def _contract() -> list[set[str]]:
    """The layers of the contract, top first, each a set of names without `acbslurm.`."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layered,) = [c for c in config["contracts"] if c["type"] == "layers"]
    return [
        {n.strip().removeprefix("acbslurm.") for n in row.split("|")} for row in layered["layers"]
    ]


def _section(title: str) -> str:
    text = PAGE.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _drawing() -> list[set[str]]:
    """The layers the page draws, top first."""
    block = _section("Layers").split("```")[1]
    return [set(m.group(1).split(" | ")) for line in block.splitlines() if (m := ROW.match(line))]


def test_the_drawing_is_the_contract() -> None:
    drawn, contract = _drawing(), _contract()
    assert len(drawn) > 5  # the pattern reads the drawing, not nothing
    assert drawn == contract, (
        "docs/architecture.md's layer drawing differs from [tool.importlinter] in "
        f"pyproject.toml:\n drawn:    {drawn}\n contract: {contract}"
    )


def test_every_package_and_module_is_in_the_contract() -> None:
    layered = set().union(*_contract())
    unlayered, gone = sorted(_top_level() - layered), sorted(layered - _top_level())
    assert not unlayered, f"in no layer of [tool.importlinter] (pyproject.toml): {unlayered}"
    assert not gone, f"[tool.importlinter] names what acbslurm/ does not have: {gone}"


def test_every_package_and_module_has_its_row_in_the_table() -> None:
    table = _section("Packages and modules")
    missing = sorted(
        n
        for n in _top_level()
        if f"`acbslurm/{n}/`" not in table and f"`acbslurm/{n}.py`" not in table
    )
    assert not missing, f"docs/architecture.md, 'Packages and modules' has no row for {missing}"
