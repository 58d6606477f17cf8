"""``acbslurm serve``: --check, usage errors, and SIGTERM stopping gateway and workers."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from acbslurm.cli.main import cli
from acbslurm.serve.errors import PoolError

REPO = Path(__file__).resolve().parents[3]


def test_check_and_usage(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    pool = tmp_path / "pool.yaml"
    pool.write_text(f"models:\n  - name: a\n    path: {tiny_models['model-a']}\n    devices: 2\n")
    r = CliRunner().invoke(cli, ["serve", "--check", str(pool)])
    assert r.exit_code == 0, r.output
    assert "a: 2 device(s)" in r.output
    r = CliRunner().invoke(cli, ["serve"])
    assert r.exit_code == 2 and "POOL_FILE or --demo" in r.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("models:\n  - name: a\n    pth: x\n")
    r = CliRunner().invoke(cli, ["serve", "--check", str(bad)])
    # main() turns AcbslurmError into one line and exit code 2 (ConfigError).
    assert isinstance(r.exception, PoolError) and r.exception.exit_code == 2
    assert "bad.yaml:3: models.0.pth: unknown key (did you mean 'path'?)" in str(r.exception)


def test_without_the_serve_extras(monkeypatch: pytest.MonkeyPatch) -> None:
    """As from the Debian package's Python: one line saying what is missing and where
    to get it, no traceback."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a)
    )
    r = CliRunner().invoke(cli, ["serve", "--demo"])
    assert r.exit_code == 1, r.output
    assert "acbslurm serve needs torch" in r.output and "acbslurm[serve]" in r.output
    assert "Traceback" not in r.output


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def test_sigterm_stops_gateway_and_workers(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    port = _free_port()
    pool = tmp_path / "pool.yaml"
    pool.write_text(
        f"devices: cpu:2\nmodels:\n  - name: a\n    path: {tiny_models['model-a']}\n"
        f"  - name: b\n    path: {tiny_models['model-b']}\n    devices: 2\n    procs: 2\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "acbslurm", "serve", str(pool), "--listen", f"127.0.0.1:{port}"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 180
        health = {}
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    health = json.loads(r.read())
                    break
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.2)
        assert health.get("status") == "ok", health
        workers = _children(proc.pid)
        # a's worker, b's leader and b's follower (a worker group of two processes)
        assert len(workers) == 3
        cmdlines = [Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") for pid in workers]
        assert sorted(c[2].decode() for c in cmdlines) == [
            "acbslurm.serve.engines.builtin.follower",
            "acbslurm.serve.engines.builtin.worker",
            "acbslurm.serve.engines.builtin.worker",
        ]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
        for pid in workers:
            assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.stderr is not None
    with proc.stderr:  # closed: no pipe left for the garbage collector to warn about
        assert "serving a, b" in proc.stderr.read()
