"""No function of acbslurm is past cyclomatic complexity 10 by radon's count, unless it
says why.

radon counts every decision a reader follows: each ``if``/``elif``/loop/``except``, each
``and``/``or``, each comprehension and conditional expression (docs/architecture.md
"Rules the checks hold"). A function over the limit passes only with a comment
``# complexity: <reason>`` on its ``def`` line or on the lines just above it (decorators
may stand between).
"""

from __future__ import annotations

import re
from pathlib import Path

from radon.complexity import cc_visit
from radon.visitors import Function

import acbslurm

LIMIT = 10
PACKAGE = Path(acbslurm.__file__).parent
GENERATED = PACKAGE / "broker" / "_generated"

# Nothing is left out: a module added under acbslurm/ is measured as it lands.
EXCLUDED: tuple[str, ...] = ()

_REASON = re.compile(r"#\s*complexity:\s*\S")


def _modules() -> list[Path]:
    paths = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if GENERATED in path.parents:
            continue
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith(EXCLUDED):
            continue
        paths.append(path)
    return paths


def _functions(source: str) -> list[Function]:
    """Every function and method radon measures, closures too (radon measures a closure
    apart from the function it is in)."""
    found: list[Function] = []
    todo = [block for block in cc_visit(source) if isinstance(block, Function)]
    while todo:
        function = todo.pop()
        found.append(function)
        todo.extend(function.closures)
    return found


def _says_why(lines: list[str], def_line: int) -> bool:
    """A ``# complexity:`` comment on the ``def`` line or just above it (decorators
    between are allowed). ``def_line`` is 1-based."""
    index = def_line - 1
    if _REASON.search(lines[index]):
        return True
    index -= 1
    while index >= 0:
        text = lines[index].strip()
        if text.startswith("#"):
            if _REASON.search(text):
                return True
        elif not text.startswith("@"):
            return False
        index -= 1
    return False


def test_the_reason_finder_reads_def_line_comments_and_decorators() -> None:
    source = [
        "# complexity: a parser's one pass",
        "@decorator",
        "def f():",
        "def g():  # complexity: a dispatcher",
        "x = 1",
        "def h():",
    ]
    assert _says_why(source, 3)
    assert _says_why(source, 4)
    assert not _says_why(source, 6)


def test_no_function_is_past_the_limit_without_a_reason() -> None:
    modules = _modules()
    assert len(modules) > 50  # the package was read, not an empty list
    offenders = []
    annotated = 0
    for path in modules:
        source = path.read_text(encoding="utf-8")
        lines = source.splitlines()
        for function in _functions(source):
            if function.complexity <= LIMIT:
                continue
            if _says_why(lines, function.lineno):
                annotated += 1
                continue
            where = f"{path.relative_to(PACKAGE.parent).as_posix()}:{function.lineno}"
            offenders.append(f"{where} {function.fullname} ({function.complexity})")
    print(f"{annotated} functions past complexity {LIMIT} say why (# complexity:)")
    assert offenders == [], (
        f"past complexity {LIMIT} by radon, without a '# complexity: <reason>' comment:\n"
        + "\n".join(offenders)
    )
