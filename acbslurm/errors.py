"""One exception tree for the whole toolkit.

The CLI maps every ``AcbslurmError`` to a one-line message and its ``exit_code``;
anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

from collections.abc import Sequence


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
