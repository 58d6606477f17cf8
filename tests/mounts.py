"""A real tmpfs for tests of a full file system (root only: it is mounted)."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def tmpfs(where: Path, size: str, mode: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (``64k``, ``1m``) and root mode ``mode`` at ``where`` (made
    here), unmounted when the block ends."""
    where.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode={mode}", "tmpfs", str(where)],
        check=True,
    )
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)
