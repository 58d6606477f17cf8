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


def conf_dir() -> Path:
    """The site files (units, example settings, slurm.conf lines): ``acbslurm/conf`` when
    installed (wheel or Debian package), ``conf/`` in a checkout."""
    installed = _PKG / "conf"
    return installed if installed.is_dir() else _PKG.parent / "conf"
