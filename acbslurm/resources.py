"""Where packaged files live, from a checkout and from an installed wheel alike."""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent


def templates_dir() -> Path:
    """The Jinja templates: ``acbslurm/templates`` when installed, ``templates/`` in a checkout."""
    installed = _PKG / "templates"
    if installed.is_dir():
        return installed
    checkout = _PKG.parent / "templates"
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError(f"acbslurm templates not found under {installed} or {checkout}")
