"""The engines a worker computes with (a model's ``engine:`` in the pool file).

``builtin`` (``engines.builtin``) is the project's own decode loop: weights loaded
once, moved to host memory and back in place (``residency``), requests decoded in
round robin (``decoding``), a model over several processes (``group``). ``vllm``
(``engines.vllm``) runs one vLLM OpenAI server per model, supervised by its worker:
started inside the model's first lease, woken at a grant when it sleeps, put to sleep
when the broker asks for its lease (a yield) or its memory (an eviction). Each has
its worker process (``python -m acbslurm.serve.engines.builtin.worker``, ``python -m
acbslurm.serve.engines.vllm``: ``supervisor.worker_module``), a subclass of
``serve.worker.Worker``; both keep the gateway's protocol (the vLLM worker passing the
client's bodies and vLLM's answers through).

Both workers' turns are ``Worker.turn``, one loop over each engine's steps
(``acquire``, ``bring_in``, ``compute``, ``on_yield``, ``resident``). The built-in
engine's steps are its gang's (``Gang.bring_in``/``evict``) and its decoding loop's
(``Decoding.step``), in ``BuiltinWorker``; vLLM's drive a ``VllmServer`` (start, wake,
sleep, forward, stop).

``ENGINES`` is the one table of what differs by engine: the worker's module, the
follower's (a process of a ``procs: N`` group on another node), and whether the
client's body goes to the engine whole (``passes_through``: the gateway's own checks,
then vLLM validates the rest).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineKind:
    name: str
    worker: str  # the worker process's module (python -m)
    follower: str  # a group follower's module; it runs the engine's own follower
    passes_through: bool  # the client's body whole to the engine, its answer back whole


_FOLLOWER = "acbslurm.serve.engines.builtin.follower"  # it starts vLLM's for engine vllm
ENGINES: dict[str, EngineKind] = {
    "builtin": EngineKind("builtin", "acbslurm.serve.engines.builtin.worker", _FOLLOWER, False),
    "vllm": EngineKind("vllm", "acbslurm.serve.engines.vllm", _FOLLOWER, True),
}


def engine_kind(name: str) -> EngineKind:
    """The table's row for a model's ``engine:`` (the pool file checked it is one)."""
    return ENGINES[name]
