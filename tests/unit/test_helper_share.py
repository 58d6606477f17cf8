"""Private helpers called from one place are at most a share of acbslurm's functions.

A helper with one caller is a hop a reader takes to follow one flow; it earns its place
when it names a real step (docs/architecture.md, "Rules the checks hold"). The count,
also printed by ``python tests/unit/test_helper_share.py [PREFIX]``:

- functions: every ``def`` and ``async def`` in acbslurm/ (methods, nested ones), the
  generated gRPC code left out;
- a single-use private helper: a function whose name starts with one ``_`` (not a
  dunder) and whose name occurs exactly once in the package besides its ``def``, as a
  call or as a reference (``key=_x``, ``target=_x``), by name across all modules; a
  name any test uses counts as used there too (a helper tested on its own is a step).
"""

from __future__ import annotations

import ast
import collections
import sys
from pathlib import Path

CEILING = 0.12
ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "acbslurm"


def _names_used(tree: ast.AST, into: collections.Counter[str]) -> None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            into[node.id] += 1
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            into[node.attr] += 1
        elif isinstance(node, ast.alias):
            into[node.name] += 1


def count() -> tuple[int, list[tuple[str, str]]]:
    """All functions, and the single-use private helpers as (module path, name)."""
    total = 0
    private: list[tuple[str, str]] = []
    used: collections.Counter[str] = collections.Counter()
    for path in sorted(PACKAGE.rglob("*.py")):
        if "_generated" in path.parts:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        _names_used(tree, used)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                total += 1
                if node.name.startswith("_") and not node.name.startswith("__"):
                    private.append((path.relative_to(ROOT).as_posix(), node.name))
    for path in sorted((ROOT / "tests").rglob("*.py")):
        _names_used(ast.parse(path.read_text(encoding="utf-8")), used)
    return total, [(p, n) for p, n in private if used[n] == 1]


def test_single_use_private_helpers_are_at_most_the_ceiling() -> None:
    total, single = count()
    share = len(single) / total
    assert share <= CEILING, (
        f"{len(single)} of {total} functions ({share:.1%}) are private helpers with one "
        f"caller, over {CEILING:.0%}: inline those whose caller stays short "
        f"(`python {Path(__file__).relative_to(ROOT)}` lists them)"
    )


if __name__ == "__main__":
    prefix = sys.argv[1] if len(sys.argv) > 1 else ""
    n, found = count()
    for module, name in found:
        if module.startswith(prefix):
            print(f"{module}: {name}")
    print(f"{len(found)} of {n} functions ({len(found) / n:.1%}) are single-use private helpers")
