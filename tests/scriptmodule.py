"""A script of the checkout (bench/, scripts/) loaded as a module, for its tests: those
folders are not packages."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType


def load(path: Path, name: str | None = None) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
