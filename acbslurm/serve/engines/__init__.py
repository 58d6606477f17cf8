"""The engines a worker computes with (a model's ``engine:`` in the pool file).

``builtin`` (``engines.builtin``) is the project's own decode loop: weights loaded
once, moved to host memory and back in place (``residency``), requests decoded in
round robin (``decoding``), a model over several processes (``group``). ``vllm``
(``engines.vllm``) runs one vLLM OpenAI server per model, supervised by its worker:
started inside the model's first lease, woken at a grant when it sleeps, put to sleep
when the broker asks for its lease (a yield) or its memory (an eviction). Each has
its worker process (``python -m acbslurm.serve.engines.builtin.worker``, ``python -m
acbslurm.serve.engines.vllm.worker``: ``supervisor.worker_module``), a subclass of
``serve.worker.Worker``; both keep the gateway's protocol (the vLLM worker passing the
client's bodies and vLLM's answers through).

Both workers' turns are ``Worker.turn``, one loop over each engine's steps
(``acquire``, ``bring_in``, ``compute``, ``on_yield``, ``resident``). The built-in
engine's steps are its gang's (``Gang.bring_in``/``evict``) and its decoding loop's
(``Decoding.step``), in ``BuiltinWorker``; vLLM's drive a ``VllmServer`` (start, wake,
sleep, forward, stop).

``ENGINES`` is the one table of what differs by engine: the worker's module, the
follower's (a process of a ``procs: N`` group on another node; both read the command
line ``placement.follower_argv`` writes: ``follower_args``), whether the client's body
goes to the engine whole (``passes_through``: the gateway's own checks, then vLLM
validates the rest), and what ``serve --demo --engine NAME`` adds to the demo's pool
file (``demo_lines``, ``demo_extras``).
"""

from __future__ import annotations

import argparse

from acbslurm.units import ascii_int
from acbslurm.values import frozen


@frozen
class EngineKind:
    name: str
    worker: str  # the worker process's module (python -m)
    follower: str  # a group follower's module (python -m), on another node
    passes_through: bool  # the client's body whole to the engine, its answer back whole
    demo_lines: tuple[str, ...] = ()  # the demo's lines for each of its models
    # the demo also serves the engine's other routes: an embedding and a Whisper model
    demo_extras: bool = False


ENGINES: dict[str, EngineKind] = {
    "builtin": EngineKind(
        "builtin",
        "acbslurm.serve.engines.builtin.worker",
        "acbslurm.serve.engines.builtin.follower",
        False,
    ),
    "vllm": EngineKind(
        "vllm",
        "acbslurm.serve.engines.vllm.worker",
        "acbslurm.serve.engines.vllm.follower",
        True,
        demo_lines=("tool_call_parser: hermes",),
        demo_extras=True,
    ),
}


def engine_kind(name: str) -> EngineKind:
    """The table's row for a model's ``engine:`` (the pool file checked it is one)."""
    return ENGINES[name]


def follower_args(prog: str, argv: list[str] | None) -> argparse.Namespace:
    """A follower's command line (``--spec`` as JSON, ``--rank``, ``--rendezvous``,
    ``--device``), as ``placement.follower_argv`` writes it."""
    p = argparse.ArgumentParser(prog=prog)
    p.add_argument("--spec", required=True, help="the model's spec as JSON")
    p.add_argument("--rank", type=ascii_int, required=True)
    p.add_argument("--rendezvous", required=True, help="HOST:PORT of the leader's store")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    return p.parse_args(argv)
