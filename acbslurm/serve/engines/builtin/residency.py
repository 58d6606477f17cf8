"""Where a worker's weights are: on its devices, or evicted to host memory in place.

The broker's ``StorageEvictor`` does the moving: every weight storage is copied to
(pinned, on CUDA) host memory and shrunk to 0 bytes; restore grows the same storages
and copies back, so the model object, its parameters and the tokenizer are untouched
and nothing is reloaded. On the CPU stand-in devices the "device" is host memory too,
but the same code runs (the storages really are freed and refilled), so the path a
GPU takes is exercised by the tests; only the copy's speed differs.

On CUDA the model (or, in a worker group, the process's stage) is moved to the first
GPU of its part of the lease at the first grant (weights are read from disk into host
memory once, at start). Tensor parallelism over the other GPUs is not implemented
(docs/serve.md).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import torch

from acbslurm.broker.evict import StorageEvictor
from acbslurm.values import mutable


@mutable
class SwapStats:
    swaps_out: int = 0
    swaps_in: int = 0
    swap_out_seconds: float = 0.0
    swap_in_seconds: float = 0.0
    bytes_out: int = 0
    bytes_in: int = 0


def model_storages(model: torch.nn.Module) -> list[Any]:
    """The unique, resizable storages of the model's parameters and buffers."""
    seen: dict[int, Any] = {}
    for t in [*model.parameters(), *model.buffers()]:
        st = t.untyped_storage()
        if st.nbytes() and st._cdata not in seen:
            seen[st._cdata] = st
    return sorted(seen.values(), key=lambda s: -s.nbytes())


def make_resizable(model: torch.nn.Module) -> None:
    """Give memory-mapped (safetensors) weights their own storages, which can be freed."""
    with torch.no_grad():
        clones: dict[int, torch.Tensor] = {}
        for t in [*model.parameters(), *model.buffers()]:
            st = t.untyped_storage()
            if st.resizable():
                continue
            key = st._cdata
            if key not in clones:
                clones[key] = torch.empty(0, dtype=torch.uint8, device=t.device).set_(st).clone()
            fresh = clones[key]
            t.set_(fresh.untyped_storage(), t.storage_offset(), t.size(), t.stride())


class Residency:
    """Weights of one model: ``ensure_on_device()`` before compute, ``evict()`` on request."""

    def __init__(self, model: torch.nn.Module, device: str) -> None:
        self.model = model
        self.lock = threading.Lock()
        self.stats = SwapStats()
        self.kind = device
        self.torch_device: torch.device | None = None
        self.evictor: StorageEvictor | None = None
        make_resizable(model)
        self.weights = sum(s.nbytes() for s in model_storages(model))
        if device == "cpu":
            self.torch_device = torch.device("cpu")
            self.evictor = StorageEvictor(self.torch_device, keep_pinned=False)
            # Loaded from disk into host memory once; the first grant moves it "on".
            self.evictor.evict(model_storages(model))
            self.evictor.stats = type(self.evictor.stats)()

    @property
    def resident(self) -> bool:
        return self.evictor is not None and not self.evictor.evicted

    @property
    def resident_bytes(self) -> int:
        return self.weights if self.resident else 0

    @property
    def host_bytes(self) -> int:
        return 0 if self.resident else self.weights

    def ensure_on_device(self, cuda_index: int = 0) -> float:
        """Bring the weights back (caller holds ``lock`` and a lease); seconds it took."""
        t0 = time.perf_counter()
        if self.evictor is None:  # CUDA, first grant: move the host copy on
            self.torch_device = torch.device("cuda", cuda_index)
            self.model.to(self.torch_device)
            self.evictor = StorageEvictor(self.torch_device)
        elif self.evictor.evicted:
            self.evictor.restore()
        else:
            return 0.0
        dt = time.perf_counter() - t0
        self.stats.swaps_in += 1
        self.stats.swap_in_seconds += dt
        self.stats.bytes_in += self.weights
        return dt

    def evict(self) -> float:
        """Move the weights to host memory (takes ``lock``); seconds it took."""
        with self.lock:
            return self.evict_locked()

    def evict_locked(self) -> float:
        """``evict`` for a caller that holds ``lock``."""
        if self.evictor is None or self.evictor.evicted:
            return 0.0
        t0 = time.perf_counter()
        self.evictor.evict(model_storages(self.model))
        dt = time.perf_counter() - t0
        self.stats.swaps_out += 1
        self.stats.swap_out_seconds += dt
        self.stats.bytes_out += self.weights
        return dt
