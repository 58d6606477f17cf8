"""Errors of the serving layer: those a user sees, and a worker's own (``TurnBroken``)."""

from __future__ import annotations

from acbslurm.errors import AcbslurmError, ConfigError


class PoolError(ConfigError):
    """The pool file is invalid (every message names ``file:line``)."""


class KeyFileError(PoolError):
    """A pool's key file (``api_keys:``) is unsafe or invalid: each problem names the
    file (and line), never a key."""

    def __init__(self, *problems: str) -> None:
        self.problems = problems
        if len(problems) == 1:
            super().__init__(problems[0])
        else:
            super().__init__("invalid key file:\n  " + "\n  ".join(problems))


class ListenError(ConfigError, ValueError):
    """An address to listen on is not HOST:PORT (``--listen``, a pool's ``listen:``).

    A ValueError too: the pool file's checks collect it with the file's line."""


class ServeError(AcbslurmError):
    """The pool cannot be served (a model cannot fit, a worker cannot start)."""


class TurnBroken(AcbslurmError):
    """A worker's engine cannot go on (a peer of a built-in group failed): the turn's
    lease goes back with nothing resident, and the worker ends (the gateway restarts
    it)."""


class ProtocolError(AcbslurmError, ValueError):
    """A line between the gateway and a worker is not one of serve/protocol.py's
    messages (not JSON, an unknown type, a required field missing); the reader logs it
    and reads on."""
