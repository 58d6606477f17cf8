"""acbslurm.serve is a library: it never imports the CLI layer or click."""

from __future__ import annotations

import ast
from pathlib import Path

SERVE = Path(__file__).resolve().parents[3] / "acbslurm" / "serve"


def test_serve_does_not_import_cli_or_click() -> None:
    bad = []
    for f in sorted(SERVE.glob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            bad += [f"{f.name}: {n}" for n in names if n == "click" or n.startswith("acbslurm.cli")]
    assert bad == []
