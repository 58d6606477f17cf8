"""click parameter types for every number option of every command (and agarun's).

click's ``INT`` and ``FLOAT`` are ``int()`` and ``float()``: they read ``٢`` (Arabic-Indic
digits) as 2, and ``FloatRange`` lets ``nan`` and ``inf`` through (``--connect-timeout
nan`` waited forever). These read what ``acbslurm.units`` reads: ASCII digits, finite
numbers. They keep click's ranges, so ``--help`` still shows ``[x>=1]`` and a value out
of range reads as click's own "Invalid value for '-n'" (exit 2).

It sits below ``broker`` so that agarun's command uses it too; the Slurm hooks never
import it (they import no click).
"""

from __future__ import annotations

from typing import Any

import click

from acbslurm.units import finite_float, is_ascii_int


class AsciiInt(click.IntRange):
    """A whole number in ASCII digits (an optional ``-``), within ``min``/``max``."""

    name = "integer"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, str):
            digits = value.removeprefix("-")
            if not is_ascii_int(digits):
                self.fail(f"{value!r} is not a whole number (ASCII digits 0-9).", param, ctx)
        elif isinstance(value, bool) or not isinstance(value, int):
            self.fail(f"{value!r} is not a whole number.", param, ctx)
        return super().convert(int(value), param, ctx)


class FiniteFloat(click.FloatRange):
    """A finite number in ASCII (no ``nan``, no ``inf``), within ``min``/``max``."""

    name = "float"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            self.fail(f"{value!r} is not a number.", param, ctx)
        try:
            number = finite_float(value)
        except ValueError as exc:
            self.fail(f"{exc}.", param, ctx)
        return super().convert(number, param, ctx)

    def _describe_range(self) -> str:
        # click's FloatRange shows "[x<=None]" in --help when neither bound is set.
        if self.min is None and self.max is None:
            return ""
        return str(super()._describe_range())
