"""The follower of an ``engine: vllm`` group on its node (the follower process,
``acbslurm.serve.engines.builtin.follower``, hands over to ``follow``): vLLM's
headless node, until it exits or the gateway stops the group (engines/vllm_nodes.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from typing import Any

from acbslurm.serve import procs
from acbslurm.serve.engines.vllm import VllmServer, die_with_parent
from acbslurm.serve.engines.vllm_nodes import STOP_GRACE, headless_argv
from acbslurm.serve.pool import ModelSpec


def follow(spec: ModelSpec, rank: int, rendezvous: str, device: str) -> int:
    """A follower of an ``engine: vllm`` group: vLLM's headless node ``rank``, until it
    exits or this process gets SIGTERM (the gateway stopping the group)."""
    host, port = rendezvous.rsplit(":", 1)
    server = VllmServer(spec, device)
    server.group = (host.strip("[]"), int(port), rank)
    argv, env = server.command([])
    # Its folder holds only what the API server uses (socket, chat template): gone now,
    # so that a follower SIGKILLed with its srun step leaves nothing behind.
    server.stop(grace=0)
    argv = headless_argv(argv)
    if device != "cuda":
        env["CUDA_VISIBLE_DEVICES"] = ""
    else:
        env.pop("CUDA_VISIBLE_DEVICES", None)  # the step's own GPUs on this node
    proc = subprocess.Popen(
        [*die_with_parent(), *argv],
        stdin=subprocess.DEVNULL,
        env=env,
        close_fds=True,
        start_new_session=True,
    )

    def stop(signum: int, frame: Any) -> None:  # noqa: ARG001
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once (srun may pass it twice)
        _stop(proc)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    return proc.wait()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to vLLM's session, SIGKILL after ``STOP_GRACE`` seconds."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(STOP_GRACE)
    # every process of it, and its shared memory (an engine process outlives its
    # API server's death: serve/procs.py)
    procs.remove_shm(procs.kill_session(proc.pid, wait=5))
