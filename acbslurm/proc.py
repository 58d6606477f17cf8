"""The one place that runs external commands.

Commands are argv lists (never a shell string), so nothing a user wrote is ever
interpreted by a shell. Failures raise ``CommandError`` (or the subclass asked for)
carrying the command, its exit code, stdout and stderr.
"""

from __future__ import annotations

import os
import sys
import time

from acbslurm.errors import CommandError
from acbslurm.values import frozen

TYPE_CHECKING = False  # a lean-path module: CONTRIBUTING.md, "Lean imports"
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any


def _debug(msg: str, *args: object) -> None:
    # Logging is imported only by entry points that configure it: if nobody did, no
    # handler would show this anyway, and the Slurm hooks skip its import
    # (docs/benchmarks.md, "Where the client's time went").
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


class TimedOut(Exception):
    """A command ran past its timeout (raised as ``error`` by ``run``), with what it
    wrote until then."""

    def __init__(self, out: str, err: str) -> None:
        super().__init__("timed out")
        self.out, self.err = out, err


class Started:
    """A command ``start`` began, stdout and stderr on pipes; ``run(argv, started=...)``
    waits for it and reads it as it would have run it. A caller that needs an answer
    starts the command before its own imports, which then go on while it runs."""

    def __init__(
        self, argv: list[str], pid: int | None, fds: tuple[int, int], error: OSError | None
    ) -> None:
        self.argv = argv
        self.pid = pid  # None: it could not start, for ``error``
        self.fds = fds  # the read ends of its stdout and stderr
        self.error = error
        self.returncode: int | None = None


def start(argv: Sequence[str], *, env: Mapping[str, str] | None = None) -> Started:
    """Start ``argv`` for a later ``run``: stdin /dev/null, stdout and stderr captured,
    SIGPIPE and SIGXFSZ at their defaults (as subprocess gives a child). posix_spawn
    rather than subprocess, so that nothing more than os is needed to begin."""
    from signal import SIGPIPE, SIGXFSZ

    argv = [str(a) for a in argv]
    _debug("start: %s", argv)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    null = os.open(os.devnull, os.O_RDONLY)
    actions = [(os.POSIX_SPAWN_DUP2, null, 0), (os.POSIX_SPAWN_DUP2, out_w, 1)]
    actions.append((os.POSIX_SPAWN_DUP2, err_w, 2))
    spawn = os.posix_spawn if os.sep in argv[0] else os.posix_spawnp
    try:
        pid = spawn(
            argv[0],
            argv,
            dict(os.environ if env is None else env),
            file_actions=actions,
            setsigdef=(SIGPIPE, SIGXFSZ),
        )
    except OSError as exc:
        os.close(out_r)
        os.close(err_r)
        return Started(argv, None, (-1, -1), exc)
    finally:
        for fd in (out_w, err_w, null):
            os.close(fd)
    return Started(argv, pid, (out_r, err_r), None)


def stop(started: Started) -> None:
    """End ``started`` unread: killed if it still runs, reaped, its pipes closed."""
    if started.pid is not None and started.returncode is None:
        _kill(started)


def _kill(started: Started) -> None:
    """Kill ``started`` and reap it (it was never waited for: its pid is still its own)."""
    import signal

    assert started.pid is not None
    os.kill(started.pid, signal.SIGKILL)
    _reap(started)


def _reap(started: Started) -> int:
    assert started.pid is not None
    for fd in started.fds:
        if fd >= 0:
            os.close(fd)
    started.fds = (-1, -1)
    if started.returncode is None:
        started.returncode = os.waitstatus_to_exitcode(os.waitpid(started.pid, 0)[1])
    return started.returncode


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
    started: Started | None = None,
) -> Result:
    """Run ``argv`` and capture its output as text.

    ``extra_env`` is merged over ``env`` (or over this process's environment).
    ``user`` runs the command as another user (needs root). ``started``: ``argv`` as
    ``start`` began it, which is waited for instead (its timeout counted from here).
    """
    argv = [str(a) for a in argv]
    full_env = dict(os.environ if env is None else env)
    if extra_env:
        full_env.update(extra_env)
    _debug("run: %s", argv)
    try:
        code, out, err = _run(argv, input, timeout, full_env, user, cwd, watchdog, started)
    except Stopped as exc:
        raise error(argv, None, reason=str(exc)) from None
    except FileNotFoundError as exc:
        raise error(argv, None, reason=f"{argv[0]} not found: {exc.strerror}") from None
    except OSError as exc:  # not executable, a bad cwd...
        raise error(argv, None, reason=f"{argv[0]} cannot be started: {exc.strerror}") from None
    except TimedOut as exc:
        raise error(argv, None, exc.out, exc.err, reason=f"timed out after {timeout:g} s") from None
    result = Result(argv, code, out, err)
    if check and code != 0:
        raise error(argv, code, out, err)
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
    started: Started | None = None,
) -> tuple[int, str, str]:
    """The command's exit code, stdout and stderr."""
    if started is not None:
        return _finish(started, timeout, watchdog)
    import subprocess

    stdin = None if input is not None else subprocess.DEVNULL
    try:
        if watchdog is None:
            cp = subprocess.run(
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
            return cp.returncode, cp.stdout, cp.stderr
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
            return _watched(p, input, timeout, watchdog)
    except subprocess.TimeoutExpired as exc:
        raise TimedOut(_text(exc.stdout), _text(exc.stderr)) from None


def _watched(
    p: subprocess.Popen[str], input: str | None, timeout: float | None, watchdog: Watchdog
) -> tuple[int, str, str]:
    """Wait for ``p``, asking ``watchdog`` once when it has run ``watchdog.after``."""
    import subprocess

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
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            raise TimedOut(out or "", err or "") from None
    return p.returncode, out, err


def _finish(
    started: Started, timeout: float | None, watchdog: Watchdog | None
) -> tuple[int, str, str]:
    """``started``'s outcome, as ``_run`` gives a command's (the timeout and the
    watchdog's time counted from this call)."""
    if started.pid is None:
        raise started.error or OSError("not started")
    try:
        out, err = _read_both(started, timeout, watchdog)
    except BaseException:
        stop(started)  # stopped by the watchdog, timed out, interrupted: never left
        raise
    return _reap(started), _decode(out), _decode(err)


def _read_both(
    started: Started, timeout: float | None, watchdog: Watchdog | None
) -> tuple[bytes, bytes]:
    """All of ``started``'s stdout and stderr, read as they come (neither pipe fills
    while the other is waited on); Stopped or TimedOut as ``_watched`` raises them."""
    import selectors

    chunks: dict[int, list[bytes]] = {fd: [] for fd in started.fds}
    t0, ask = time.monotonic(), watchdog
    with selectors.DefaultSelector() as sel:
        for fd in started.fds:
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            ready = sel.select(_next_wait(t0, timeout, ask))
            for key, _ in ready:
                data = os.read(key.fd, 65536)
                if data:
                    chunks[key.fd].append(data)
                else:
                    sel.unregister(key.fd)
            if not ready:
                ask = _quiet(t0, timeout, ask, [b"".join(chunks[fd]) for fd in started.fds])
    out, err = (b"".join(chunks[fd]) for fd in started.fds)
    return out, err


def _quiet(
    t0: float, timeout: float | None, ask: Watchdog | None, output: list[bytes]
) -> Watchdog | None:
    """Nothing came before the next mark: the watchdog asked (Stopped when it says so;
    None once it was asked), or TimedOut with ``output`` past the timeout."""
    waited = time.monotonic() - t0
    if ask is not None and waited >= ask.after:
        reason = ask.ask()
        if reason:
            raise Stopped(reason)
        return None
    if timeout is not None and waited >= timeout:
        raise TimedOut(_decode(output[0]), _decode(output[1]))
    return ask


def _next_wait(t0: float, timeout: float | None, watchdog: Watchdog | None) -> float | None:
    """Seconds until the next of the timeout and the watchdog's question (None: none)."""
    marks = [m for m in (timeout, None if watchdog is None else watchdog.after) if m is not None]
    return max(0.0, min(marks) - (time.monotonic() - t0)) if marks else None


def _decode(data: bytes) -> str:
    """Output as text, as subprocess's text mode gives it: the locale's encoding (UTF-8
    in Python's UTF-8 mode), universal newlines."""
    if sys.flags.utf8_mode:
        encoding = "utf-8"
    else:
        import locale

        encoding = locale.getencoding()
    text = data.decode(encoding)
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text
