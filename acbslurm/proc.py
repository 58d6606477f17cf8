"""The one place that runs external commands.

Commands are argv lists (never a shell string), so nothing a user wrote is ever
interpreted by a shell. Failures raise ``CommandError`` (or the subclass asked for)
carrying the command, its exit code, stdout and stderr.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from acbslurm.errors import CommandError


def _debug(msg: str, *args: object) -> None:
    # Logging is imported only by entry points that configure it: if nobody did, no
    # handler would show this anyway, and the Slurm hooks save ~5 ms of import.
    logging = sys.modules.get("logging")
    if logging is not None:
        logging.getLogger(__name__).debug(msg, *args)


@dataclass(frozen=True)
class Result:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str


def run(
    argv: Sequence[str],
    *,
    input: str | None = None,
    timeout: float | None = 60.0,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    extra_env: Mapping[str, str] | None = None,
    user: str | int | None = None,
    cwd: str | None = None,
    error: type[CommandError] = CommandError,
) -> Result:
    """Run ``argv`` and capture its output as text.

    ``extra_env`` is merged over ``env`` (or over this process's environment).
    ``user`` runs the command as another user (needs root).
    """
    argv = [str(a) for a in argv]
    full_env = dict(os.environ if env is None else env)
    if extra_env:
        full_env.update(extra_env)
    _debug("run: %s", argv)
    try:
        cp = subprocess.run(
            argv,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=full_env,
            user=user,
            cwd=cwd,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
    except FileNotFoundError as exc:
        raise error(argv, None, reason=f"{argv[0]} not found: {exc.strerror}") from None
    except OSError as exc:  # not executable, a bad cwd...
        raise error(argv, None, reason=f"{argv[0]} cannot be started: {exc.strerror}") from None
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        raise error(argv, None, out, err, reason=f"timed out after {timeout:g} s") from None
    result = Result(argv, cp.returncode, cp.stdout, cp.stderr)
    if check and cp.returncode != 0:
        raise error(argv, cp.returncode, cp.stdout, cp.stderr)
    return result
