"""A follower of an ``engine: vllm`` group on its node: ``python -m
acbslurm.serve.engines.vllm.follower`` (the engine table's follower), vLLM's headless
node, until it exits or the gateway stops the group (``nodes``)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from typing import Any

from acbslurm.serve import procs
from acbslurm.serve.engines import follower_args
from acbslurm.serve.engines.vllm.nodes import STOP_GRACE, headless_argv
from acbslurm.serve.engines.vllm.server import VllmServer, die_with_parent
from acbslurm.serve.pool import ModelSpec


def main(argv: list[str] | None = None) -> int:
    """vLLM's headless node of the group's rank, until it exits or this process gets
    SIGTERM (the gateway stopping the group)."""
    args = follower_args("acbslurm.serve.engines.vllm.follower", argv)
    spec = ModelSpec.from_dict(json.loads(args.spec))
    host, port = args.rendezvous.rsplit(":", 1)
    server = VllmServer(spec, args.device)
    server.group = (host.strip("[]"), int(port), args.rank)
    argv, env = server.command([])
    # Its folder holds only what the API server uses (socket, chat template): gone now,
    # so that a follower SIGKILLed with its srun step leaves nothing behind.
    server.stop(grace=0)
    argv = headless_argv(argv)
    if args.device != "cuda":
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
        """SIGTERM to vLLM's session, SIGKILL after ``STOP_GRACE`` seconds."""
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once (srun may pass it twice)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(STOP_GRACE)
        # every process of it, and its shared memory (an engine process outlives its
        # API server's death: serve/procs.py)
        procs.remove_shm(procs.kill_session(proc.pid, wait=5))
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    return proc.wait()


if __name__ == "__main__":
    sys.exit(main())
