"""The engines a worker computes with (a model's ``engine:`` in the pool file).

``builtin`` is the project's own decode loop (``serve.worker.Worker``, ``generate``,
``residency``: weights moved to host memory and back in place). ``vllm`` runs one vLLM
OpenAI server per model, supervised by its worker (``engines.vllm.VllmWorker``):
started inside the model's first lease, woken at a grant when it sleeps, put to sleep
when the broker asks for its lease (a yield) or its memory (an eviction). Each has
its worker process (``python -m acbslurm.serve.worker``, ``python -m
acbslurm.serve.engines.vllm``: ``workers.worker_module``); both keep the gateway's
protocol (the vLLM worker passing the client's bodies and vLLM's answers through).

``Engine`` is the five steps a worker drives a server through; ``VllmServer`` is one.
The built-in engine's steps (``Gang.bring_in``/``evict``, ``Decoding.step``) are still
the worker's own methods: they were not moved behind it.
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
