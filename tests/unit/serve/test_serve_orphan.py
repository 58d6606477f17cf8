"""The gateway's watchdog kills a worker that outlives its vLLM server: such a worker
sends nothing (it is idle), so no heartbeat notices it, and its model's requests would
reach a dead server until it exits. Real processes: a stand-in worker
(orphanworker.py) that reports a server, and a real ``sleep`` as that server."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path

import pytest

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


def test_a_worker_that_outlives_its_server_is_killed_and_restarted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(supervisor, "worker_module", lambda engine: "orphanworker")
    monkeypatch.setattr(supervisor, "SERVER_GONE_GRACE", 0.5)
    env = {"PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT)])}
    h = supervisor.WorkerHandle(spec(), "unused", "cpu", max_queue=4, env=env, start_timeout=60)
    h.hang_timeout = 4.0  # the watchdog's step: 1 s

    async def scenario() -> tuple[int, int, str, str, bool]:
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
            return h.restarts, code, reason, shm, gone
        finally:
            if h.server_pid:  # the second worker's "server" (its own session)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(h.server_pid, signal.SIGKILL)
            await h.stop()
            for p in Path("/dev/shm").glob("psm_acbslurm_test_*"):
                p.unlink(missing_ok=True)

    restarts, code, reason, shm, gone = asyncio.run(scenario())
    assert restarts == 1
    assert code == -signal.SIGKILL
    assert "its vLLM server" in reason and "worker did not exit" in reason, reason
    assert gone, f"{shm} was left"
