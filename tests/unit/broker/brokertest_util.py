"""Helpers for the broker tests: a real ``acbslurm broker serve`` on a private socket."""

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def spans(log: Path) -> list[tuple[float, float]]:
    """The device calls busy_app.py logged (``start end`` per line, monotonic seconds);
    none yet when it has not written its log."""
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        a, _, b = line.partition(" ")
        if b:
            out.append((float(a), float(b)))
    return out


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env["PYTHONWARNINGS"] = "ignore"
    env.pop("SLURM_JOB_ID", None)
    env.pop("ACBSLURM_BROKER_ADDRESS", None)
    return env


@dataclass
class Daemon:
    address: str
    proc: subprocess.Popen[str]

    lines: list[str]

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(10)

    def kill(self) -> None:
        """SIGKILL: no clean stop (the socket and the state file stay behind)."""
        self.proc.kill()
        self.proc.wait(10)

    @property
    def socket(self) -> Path:
        return Path(self.address.removeprefix("unix:"))


def start_broker(*args: str, sock: Path | None = None) -> Daemon:
    """Start a broker and return once it says it listens (gRPC socket AND local lane:
    the socket file alone appears before the lane is bound). ``sock``: its socket
    (default: a new private folder's), e.g. to restart a killed broker in its place."""
    if sock is None:
        sock = Path(tempfile.mkdtemp(prefix="acbb-", dir="/tmp")) / "b.sock"
    address = f"unix:{sock}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "acbslurm", "broker", "serve", "--listen", address, *args],
        env=child_env(),
        stderr=subprocess.PIPE,
        text=True,
    )
    ready = threading.Event()
    lines: list[str] = []

    def drain() -> None:  # also keeps a chatty broker from blocking on a full pipe
        assert proc.stderr is not None
        with proc.stderr:  # closed at the broker's end: no unclosed pipe is left to GC
            for line in proc.stderr:
                lines.append(line)
                if "broker: listening on" in line:
                    ready.set()

    threading.Thread(target=drain, daemon=True).start()
    deadline = time.monotonic() + 20
    while not ready.wait(0.05):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"broker did not start: {''.join(lines)}")
    return Daemon(address, proc, lines)
