"""One exception tree for the whole toolkit.

The CLI maps every ``AcbslurmError`` to a one-line message and its ``exit_code``;
anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

TYPE_CHECKING = False  # a lean-path module: CONTRIBUTING.md, "Lean imports"
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

# A message quotes what the user wrote; a value of 10,000 items or a 1 MB line would make
# it unreadable (and slow to print), so a line keeps its start and its end.
MESSAGE_LIMIT = 300


def clip(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """``text``, or its start and end around a note of how much was left out."""
    if len(text) <= limit:
        return text
    head, tail = limit * 2 // 3, limit // 4
    return f"{text[:head]}...<{len(text) - head - tail} characters left out>...{text[-tail:]}"


def short_repr(value: Any, limit: int = 120) -> str:
    """``repr(value)`` for a message, clipped to about ``limit`` characters. A list or
    mapping is cut by reprlib before it is ever written out whole: a value of YAML
    aliases (a settings file may be any file) would be billions of items."""
    if isinstance(value, str | int | float) or value is None:
        return clip(repr(value), limit)
    import reprlib

    short = reprlib.Repr()
    short.maxstring = short.maxother = limit
    short.maxlevel, short.maxlist, short.maxdict = 2, 4, 4
    return clip(short.repr(value), limit)


class AcbslurmError(Exception):
    """Base of every error acbslurm reports to a user."""

    exit_code = 1


class ConfigError(AcbslurmError):
    """A configuration value or file is wrong (names the value and where it came from)."""

    exit_code = 2


class SpecError(ConfigError):
    """A job spec is invalid."""


class SetupError(AcbslurmError):
    """The machine lacks something (a package, root, a daemon); the message names the fix."""

    exit_code = 3


class CommandError(AcbslurmError):
    """An external command failed: carries the command, exit code, stdout and stderr."""

    def __init__(
        self,
        argv: Sequence[str],
        returncode: int | None,
        stdout: str = "",
        stderr: str = "",
        reason: str = "",
    ) -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.reason = reason
        super().__init__(self._message())

    def _message(self) -> str:
        from shlex import join

        what = self.reason or f"exited with code {self.returncode}"
        msg = f"command failed ({what}): {join(self.argv)}"
        detail = (self.stderr or self.stdout).strip()
        if detail:
            tail = "\n".join(detail.splitlines()[-15:])
            msg += "\n" + tail
        return msg


class SlurmError(CommandError):
    """A Slurm command failed."""


class DockerError(AcbslurmError):
    """The Docker daemon refused or could not be reached."""


class GpuMappingError(AcbslurmError):
    """Slurm's GPU allocation could not be mapped to GPU UUIDs."""


class AccountingError(AcbslurmError):
    """The accounting database cannot be read (down, credentials, schema)."""


class BrokerError(AcbslurmError):
    """The GPU broker is unreachable or refused a request."""


class CgroupJoinError(AcbslurmError):
    """A container could not be put into its job's cgroups (the message says why); it
    is not started."""
