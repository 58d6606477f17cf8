"""Entry points Slurm runs (Prolog=, Epilog=, TaskProlog=). Placeholder until issue 4 lands:
each hook succeeds without doing anything."""

from __future__ import annotations


def prolog_main() -> int:
    return 0


def epilog_main() -> int:
    return 0


def task_prolog_main() -> int:
    return 0
