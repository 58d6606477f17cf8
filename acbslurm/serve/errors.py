"""Errors of the serving layer that a user sees."""

from __future__ import annotations

from acbslurm.errors import AcbslurmError, ConfigError


class PoolError(ConfigError):
    """The pool file is invalid (every message names ``file:line``)."""


class ListenError(ConfigError, ValueError):
    """An address to listen on is not HOST:PORT (``--listen``, a pool's ``listen:``).

    A ValueError too: the pool file's checks collect it with the file's line."""


class ServeError(AcbslurmError):
    """The pool cannot be served (a model cannot fit, a worker cannot start)."""
