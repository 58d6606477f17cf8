"""TRES strings as slurmdbd stores them: ``1=2,2=2048,4=1,1001=2`` (id=count)."""

from __future__ import annotations


def tres_count(tres: str | None, tres_id: int | None) -> int:
    """The count of ``tres_id`` in ``tres`` (0 when absent, empty or unparsable)."""
    if not tres or tres_id is None:
        return 0
    want = f"{tres_id}="
    for item in tres.split(","):
        if item.startswith(want):
            try:
                return int(item[len(want) :])
            except ValueError:
                return 0
    return 0


def tres_value(tres: str | None, tres_id: int | None) -> float | None:
    """Like ``tres_count`` but None when the id is not recorded (usage strings)."""
    if not tres or tres_id is None:
        return None
    want = f"{tres_id}="
    for item in tres.split(","):
        if item.startswith(want):
            try:
                return float(item[len(want) :])
            except ValueError:
                return None
    return None
