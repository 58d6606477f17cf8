"""The one place that runs external commands.

Commands are argv lists (never a shell string), so nothing a user wrote is ever
interpreted by a shell. Failures raise ``CommandError`` (or the subclass asked for)
carrying the command, its exit code, stdout and stderr.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence

from acbslurm.errors import CommandError
from acbslurm.values import frozen

# On the hook path: no typing at run time (tests/unit/hooks/test_hooks_imports.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def _debug(msg: str, *args: object) -> None:
    # Logging is imported only by entry points that configure it: if nobody did, no
    # handler would show this anyway, and the Slurm hooks save ~5 ms of import.
    logging = sys.modules.get("logging")
    if logging is not None:
        logging.getLogger(__name__).debug(msg, *args)


@frozen
class Result:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str


@frozen
class Watchdog:
    """Asked once, when a command has run ``after`` seconds: a reason to stop it now
    ("" lets it run on to its timeout). A Slurm query whose controller is down spends
    its own retries (18 s for ``squeue --jobs=1``) before it says so; a quick
    ``scontrol ping`` can tell sooner (slurm/commands.py)."""

    after: float
    ask: Callable[[], str]


class Stopped(Exception):
    """The watchdog's reason to stop a command (raised as ``error`` by ``run``)."""


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
    watchdog: Watchdog | None = None,
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
        cp = _run(argv, input, timeout, full_env, user, cwd, watchdog)
    except Stopped as exc:
        raise error(argv, None, reason=str(exc)) from None
    except FileNotFoundError as exc:
        raise error(argv, None, reason=f"{argv[0]} not found: {exc.strerror}") from None
    except OSError as exc:  # not executable, a bad cwd...
        raise error(argv, None, reason=f"{argv[0]} cannot be started: {exc.strerror}") from None
    except subprocess.TimeoutExpired as exc:
        out, err = _text(exc.stdout), _text(exc.stderr)
        raise error(argv, None, out, err, reason=f"timed out after {timeout:g} s") from None
    result = Result(argv, cp.returncode, cp.stdout, cp.stderr)
    if check and cp.returncode != 0:
        raise error(argv, cp.returncode, cp.stdout, cp.stderr)
    return result


def _text(captured: bytes | str | None) -> str:
    """What a timed-out command wrote, as text ("" for nothing)."""
    return captured.decode() if isinstance(captured, bytes) else (captured or "")


def _identity(user: str | int | None) -> dict[str, Any]:
    """subprocess's arguments to run as ``user`` with the user's own groups: ``user=``
    alone changes the uid and keeps root's gid 0, which opens every root:root 0660 file
    (the fenced GPU device files among them) to the command."""
    if user is None:
        return {}
    import pwd

    pw = pwd.getpwnam(user) if isinstance(user, str) else pwd.getpwuid(user)
    groups = os.getgrouplist(pw.pw_name, pw.pw_gid)
    return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": groups}


def _run(
    argv: list[str],
    input: str | None,
    timeout: float | None,
    env: dict[str, str],
    user: str | int | None,
    cwd: str | None,
    watchdog: Watchdog | None,
) -> subprocess.CompletedProcess[str]:
    stdin = None if input is not None else subprocess.DEVNULL
    if watchdog is None:
        return subprocess.run(
            argv,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=cwd,
            stdin=stdin,
            **_identity(user),
        )
    pipe = subprocess.PIPE
    with subprocess.Popen(
        argv,
        stdin=pipe if input is not None else stdin,
        stdout=pipe,
        stderr=pipe,
        text=True,
        env=env,
        cwd=cwd,
        **_identity(user),
    ) as p:
        first = watchdog.after if timeout is None else min(watchdog.after, timeout)
        try:
            out, err = p.communicate(input, timeout=first)
        except subprocess.TimeoutExpired:
            reason = watchdog.ask()
            if reason:
                # Not communicate(): a child of the command that holds its pipes would
                # keep this waiting; the command itself is what was stopped.
                p.kill()
                p.wait()
                raise Stopped(reason) from None
            rest = None if timeout is None else max(0.0, timeout - first)
            try:
                out, err = p.communicate(timeout=rest)
            except subprocess.TimeoutExpired as exc:
                p.kill()
                out, err = p.communicate()
                raise subprocess.TimeoutExpired(argv, timeout or 0, out, err) from exc
        return subprocess.CompletedProcess(argv, p.returncode, out, err)
