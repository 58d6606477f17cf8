"""The engines a worker computes with (a model's ``engine:`` in the pool file).

``builtin`` is the project's own decode loop (``serve.worker``, ``generate``,
``residency``: weights moved to host memory and back in place). ``vllm`` runs one vLLM
OpenAI server per model, supervised by its worker (``engines.vllm``): started inside
the model's first lease, woken at each grant, put to sleep before each release.

Both are driven by the worker through the same five steps, ``Engine`` below.
"""

from __future__ import annotations

from typing import Any, Protocol


class Engine(Protocol):
    def start(self, devices: list[Any]) -> None:
        """Make the model servable on ``devices`` (the first lease's)."""

    def wake(self) -> None:
        """A grant: the model's memory back on its devices."""

    def sleep(self) -> None:
        """Before a release: the devices' memory given up (nothing in flight)."""

    def forward(self, request: dict[str, Any]) -> Any:
        """Run one request (an iterator of its events)."""

    def stop(self) -> None:
        """Free everything (the worker exits)."""
