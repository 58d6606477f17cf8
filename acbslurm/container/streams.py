"""The container's output to this process's stdout/stderr, and this stdin to it.

A write that fails (a full disk: ENOSPC, a closed pipe) is not swallowed: the stream
is drained on (a reader that stops would stall the container at dockerd's buffer), the
failure is told at the end where the user can see it (stderr, or syslog when stderr
is the stream that failed) and the container's own exit code is kept. The failed
descriptor is then pointed at /dev/null, so that Python's final flush of what it still
buffers cannot fail too and turn the exit code into 120.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator

from acbslurm.dockerapi.engine import AttachStream
from acbslurm.values import field, mutable

TYPE_CHECKING = False  # a lean-path module: CONTRIBUTING.md, "Lean imports"
if TYPE_CHECKING:
    from typing import BinaryIO


@mutable
class Lost:
    """What a failed stream did not get."""

    name: str
    error: str
    written: int  # bytes that did reach it
    dropped: int = 0


@mutable
class Pump:
    """Copies the attach stream's frames, in the order they came, to stdout/stderr."""

    stream: AttachStream
    lost: dict[int, Lost] = field(default_factory=dict)
    written: dict[int, int] = field(default_factory=lambda: {1: 0, 2: 0})

    def run(self) -> None:
        try:
            for kind, data in self.stream.frames():
                self._write(2 if kind == 2 else 1, data)
        except OSError:
            pass  # the connection ends abruptly when the container is killed

    def _write(self, fd: int, data: bytes) -> None:
        if fd in self.lost:
            self.lost[fd].dropped += len(data)
            return
        target: BinaryIO = sys.stderr.buffer if fd == 2 else sys.stdout.buffer
        try:
            target.write(data)
            target.flush()
        except OSError as exc:
            name = "stderr" if fd == 2 else "stdout"
            self.lost[fd] = Lost(name, exc.strerror or str(exc), self.written[fd], len(data))
            _to_devnull(fd)
            return
        self.written[fd] += len(data)

    def report(self) -> None:
        """One line per failed stream, on stderr if it still takes one, else syslog."""
        for fd, lost in self.lost.items():
            line = (
                f"acbslurm: writing the container's {lost.name} failed after {lost.written} "
                f"bytes ({lost.error}); the {lost.dropped} bytes after that were discarded, "
                "the container ran on"
            )
            if fd == 2 or not _tell_stderr(line):
                _tell_syslog(line)


def _to_devnull(fd: int) -> None:
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)


def _tell_stderr(line: str) -> bool:
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except OSError:
        _to_devnull(2)
        return False
    return True


def tell(text: str) -> None:
    """A message of `acbslurm run` on stderr; in syslog when stderr cannot take it (a
    full disk), never an exception that would end the run."""
    line = text.rstrip("\n")
    if not _tell_stderr(line):
        _tell_syslog(line)


def _tell_syslog(line: str) -> None:
    import syslog  # only on this rare path

    job = os.environ.get("SLURM_JOB_ID", "-")
    syslog.openlog("acbslurm", syslog.LOG_PID, syslog.LOG_USER)
    syslog.syslog(syslog.LOG_ERR, f"job {job}: {line.removeprefix('acbslurm: ')}")


def copy_stdin(stream: AttachStream) -> None:
    """This stdin to the container's until EOF, then its end (the half-close)."""
    try:
        while data := os.read(0, 65536):
            stream.send(data)
        stream.close_stdin()
    except OSError:
        pass  # the container ended (its side closed) or stdin went away


@contextlib.contextmanager
def raw_terminal(wanted: bool) -> Iterator[None]:
    """With a tty asked for and stdin a terminal: raw mode while the container runs,
    so keys (Ctrl-C too) go to the container's tty as `docker run -it` passes them."""
    if not (wanted and os.isatty(0)):
        yield
        return
    import termios  # here: only `-it` needs them, and every start imports this module
    import tty

    saved = termios.tcgetattr(0)
    # TCSANOW: what was typed before the container was up stays queued for it (the
    # default, TCSAFLUSH, discarded it; `docker run -it` keeps it too)
    tty.setraw(0, termios.TCSANOW)
    try:
        yield
    finally:
        termios.tcsetattr(0, termios.TCSADRAIN, saved)


def start_thread(target: Callable[..., object], *args: object) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread
