"""Logging set-up for the entry points (nothing else configures logging)."""

from __future__ import annotations

import os


def configure_logging(verbose: int) -> None:
    env_level = os.environ.get("ACBSLURM_LOG_LEVEL")
    if not verbose and not env_level:
        # Python's last-resort handler already prints warnings; importing logging here
        # would lengthen `acbslurm run`, a job's start
        # (docs/benchmarks.md, "Where the client's time went").
        return
    import logging

    level = logging.WARNING - 10 * verbose
    if env_level:
        named = logging.getLevelName(env_level.upper())
        level = named if isinstance(named, int) else logging.WARNING
    logging.basicConfig(level=level, format="acbslurm: %(levelname)s: %(message)s")
