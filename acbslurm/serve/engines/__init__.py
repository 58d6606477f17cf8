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
(``acquire``, ``bring_in``, ``compute``, ``on_yield``, ``resident``). ``Engine`` is
the five steps a worker drives a server through; ``VllmServer`` is one. The built-in
engine has no server: its steps are its gang's (``Gang.bring_in``/``evict``) and its
decoding loop's (``Decoding.step``), in ``BuiltinWorker``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol


class Engine(Protocol):
    def start(self, devices: list[Any]) -> None:
        """Start serving on ``devices`` (the first lease's)."""

    def wake(self, level: int = 1) -> None:
        """A grant: the model's memory back on its devices."""

    def sleep(self, level: int = 1, timeout: float = 600) -> None:
        """Nothing in flight (a yield, an eviction): the devices' memory given up."""

    def forward(self, path: str, body: dict[str, Any]) -> Iterator[bytes]:
        """One request (an OpenAI route and body): its answer, chunk by chunk."""

    def stop(self, grace: float = 15.0) -> None:
        """Stop the server and free what it holds."""
