"""Helpers for the broker tests: a real ``acbslurm broker serve`` on a private socket."""

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


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

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(10)


def start_broker(*args: str) -> Daemon:
    sock = Path(tempfile.mkdtemp(prefix="acbb-", dir="/tmp")) / "b.sock"
    address = f"unix:{sock}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "acbslurm", "broker", "serve", "--listen", address, *args],
        env=child_env(),
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 20
    while not sock.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"broker did not start: {proc.stderr.read() if proc.stderr else ''}")
        time.sleep(0.05)
    return Daemon(address, proc)
