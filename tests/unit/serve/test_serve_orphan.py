"""The gateway's watchdog kills a worker that outlives its vLLM server: such a worker
sends nothing (it is idle), so no heartbeat notices it, and its model's requests would
reach a dead server until it exits. Real processes: a stand-in worker
(orphanworker.py) that reports a server, and a real ``sleep`` as that server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from acbslurm.serve import supervisor
from acbslurm.serve.pool import ModelSpec

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]


def spec() -> ModelSpec:
    return ModelSpec.from_dict(
        {
            "name": "model-a",
            "path": "/nonexistent",
            "devices": 1,
            "dtype": "float32",
            "max_batch": 1,
            "max_tokens": 1,
            "max_context": 0,
            "temperature": 0.0,
            "top_p": 1.0,
            "headroom": 0,
            "engine": "vllm",
            "engine_args": {},
            "sleep_level": 1,
            "vllm_python": "",
        }
    )


async def _until(what: object, timeout: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not what():  # type: ignore[operator]
        assert asyncio.get_running_loop().time() < deadline, f"not within {timeout} s"
        await asyncio.sleep(0.05)


def scenario() -> dict[str, object]:
    """The gateway's side, in a process of its own (__main__ below), as a pool's
    gateway is. The worker's exit code is checked: a kill through asyncio's own
    ``kill`` once reaped the dead worker before the loop's child watcher did (asyncio:
    'Unknown child process', 255; supervisor._signal)."""
    supervisor.worker_module = lambda engine: "orphanworker"  # type: ignore[assignment]
    supervisor.SERVER_GONE_GRACE = 0.5  # type: ignore[misc]
    env = {"PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT)])}
    h = supervisor.WorkerHandle(spec(), "unused", "cpu", max_queue=4, env=env, start_timeout=60)
    h.hang_timeout = 4.0  # the watchdog's step: 1 s

    async def run() -> dict[str, object]:
        h.start()
        try:
            await _until(lambda: h.state == "ready" and h.server_pid)
            worker, server, shm = h.proc, h.server_pid, sorted(h.server_shm)[0]
            assert worker is not None and os.path.exists(shm)
            os.kill(server, signal.SIGKILL)  # the server dies; its worker stays
            await _until(lambda: h.restarts == 1)
            code = await worker.wait()
            reason = h.reason
            await _until(lambda: h.state == "ready" and h.proc is not worker)
            gone = not os.path.exists(shm)
            return {
                "restarts": h.restarts,
                "code": code,
                "reason": reason,
                "shm": shm,
                "gone": gone,
            }
        finally:
            if h.server_pid:  # the second worker's "server" (its own session)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(h.server_pid, signal.SIGKILL)
            await h.stop()
            for p in Path("/dev/shm").glob("psm_acbslurm_test_*"):
                p.unlink(missing_ok=True)

    return asyncio.run(run())


def test_a_worker_that_outlives_its_server_is_killed_and_restarted() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT)])}
    r = subprocess.run(
        [sys.executable, __file__], env=env, capture_output=True, text=True, timeout=180
    )
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["restarts"] == 1
    assert got["code"] == -signal.SIGKILL, r.stderr
    reason = str(got["reason"])
    assert "its vLLM server" in reason and "worker did not exit" in reason, reason
    assert got["gone"], f"{got['shm']} was left"


if __name__ == "__main__":
    print(json.dumps(scenario()))
