"""Starting, finding and stopping the sandbox's daemons by pid.

Each daemon runs in the foreground in its own session with its output in a log file;
its pid and kernel start time are recorded so that ``down`` stops exactly the process
it started (a recycled pid is never signalled). Every process also carries the marker
variable ``ACBSLURM_SANDBOX`` in its environment, which is how ``down`` finds the
daemons' own children that left the session (slurmstepd, containerd shims).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import subprocess
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from acbslurm.errors import SetupError
from acbslurm.procfs import running
from acbslurm.units import is_ascii_int
from acbslurm.values import frozen

MARKER = "ACBSLURM_SANDBOX"


def _start_time(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22 (starttime) counted after the ")" that closes the command name.
    return int(stat.rsplit(")", 1)[1].split()[19])


@frozen
class Proc:
    name: str
    pid: int
    start_time: int

    def alive(self) -> bool:
        return _start_time(self.pid) == self.start_time and running(self.pid)


def pidfile(run_dir: Path, name: str) -> Path:
    return run_dir / f"{name}.proc.json"


def read_proc(run_dir: Path, name: str) -> Proc | None:
    try:
        data = json.loads(pidfile(run_dir, name).read_text())
        return Proc(name, int(data["pid"]), int(data["start_time"]))
    except (OSError, ValueError, KeyError):
        return None


# The daemons this process started, by pid, until _reap sees them end.
_children: dict[int, subprocess.Popen[bytes]] = {}


@atexit.register
def _let_daemons_run_on() -> None:
    """The sandbox outlives the process that started it (a test session, `sandbox up`):
    its daemons' Popen objects are dropped without the warning for a running child
    ("ResourceWarning: subprocess N is still running", one per daemon)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        _children.clear()


def spawn(
    name: str,
    argv: Sequence[str],
    *,
    run_dir: Path,
    log_file: Path,
    marker: str,
    env: Mapping[str, str] | None = None,
    user: int | None = None,
    group: int | None = None,
    cwd: str | None = None,
) -> Proc:
    """Start ``argv`` detached (own session), output appended to ``log_file``."""
    full_env = dict(env if env is not None else os.environ)
    full_env[MARKER] = marker
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as log:
        log.write(f"\n--- {time.strftime('%F %T')} starting {' '.join(argv)}\n".encode())
        log.flush()
        try:
            p = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=full_env,
                start_new_session=True,
                user=user,
                group=group,
                extra_groups=[] if user is not None else None,
                cwd=cwd,
            )
        except FileNotFoundError:
            raise SetupError(f"{argv[0]} is not installed; run: make setup") from None
    # Kept until reaped: a Popen dropped while its daemon runs warns (ResourceWarning,
    # "subprocess N is still running"), and the daemon is meant to run on.
    _children[p.pid] = p
    st = _start_time(p.pid)
    proc = Proc(name, p.pid, st if st is not None else -1)
    pidfile(run_dir, name).write_text(json.dumps({"pid": proc.pid, "start_time": proc.start_time}))
    return proc


def _signal_group(proc: Proc, sig: int) -> None:
    # The daemon leads its own session, so its pgid is its pid.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(proc.pid, sig)


def stop(proc: Proc, timeout: float = 15.0) -> bool:
    """SIGTERM the daemon's process group, SIGKILL after ``timeout``. True if it was alive."""
    if not proc.alive():
        return False
    _signal_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            _reap(proc.pid)
            return True
        _reap(proc.pid)
        time.sleep(0.1)
    _signal_group(proc, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while proc.alive() and time.monotonic() < deadline:
        _reap(proc.pid)
        time.sleep(0.05)
    return True


def _reap(pid: int) -> None:
    # Daemons spawned by this very process would stay zombies without a wait.
    child = _children.get(pid)
    if child is not None:
        if child.poll() is not None:  # reaped through its Popen, which then knows it
            del _children[pid]
        return
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def marked_pids(marker: str) -> list[int]:
    """Pids of processes whose environment carries this sandbox's marker."""
    needle = f"{MARKER}={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not is_ascii_int(entry.name) or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def kill_marked(marker: str, timeout: float = 5.0) -> list[int]:
    """TERM then KILL every leftover process of this sandbox; returns the pids found."""
    pids = marked_pids(marker)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and marked_pids(marker):
        time.sleep(0.1)
    for pid in marked_pids(marker):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    # SIGKILL is not instant: a process is listed until the kernel has torn it down.
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and marked_pids(marker):
        time.sleep(0.05)
    return pids


def wait_for(
    what: str,
    check: Callable[[], bool],
    *,
    proc: Proc | None,
    log_file: Path,
    timeout: float,
    interval: float = 0.2,
) -> None:
    """Poll ``check`` until true; on timeout or daemon death raise naming the component."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except Exception:  # noqa: S110 - any failure here means "not ready yet"
            pass
        if proc is not None and not proc.alive():
            raise SetupError(f"sandbox: {what} exited during start-up\n{log_tail(log_file)}")
        if time.monotonic() > deadline:
            raise SetupError(f"sandbox: {what} not ready after {timeout:g} s\n{log_tail(log_file)}")
        time.sleep(interval)


def log_tail(log_file: Path, lines: int = 20) -> str:
    try:
        text = log_file.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return f"(no log at {log_file})"
    return f"--- last {len(text)} lines of {log_file}:\n" + "\n".join(text)
