"""Move a program's tensors off a device and back, in place.

Eviction copies every live storage on the device into (pinned) host memory and
shrinks the storage to zero bytes, which really frees the device memory. Restore
grows the same storage objects again and copies the bytes back, so every tensor,
parameter, buffer, optimizer state and view sees its data again without the
program noticing (tensor objects, shapes, strides and version counters unchanged).

Live tensors are found through the garbage collector (every torch.Tensor is a
tracked object); storages only referenced from C++ (e.g. autograd's saved
activations) are not seen and simply stay where they are. The scan runs on the
broker client's thread while the program's main thread goes on, so it must never let
the program run while it holds ``gc.get_objects()``'s list: see ``live_tensors``.

Pinned host memory: PyTorch's caching host allocator keeps freed pinned blocks for
reuse, which makes the next eviction of the same sizes fast (no page locking) but
holds the memory although the data are back on the GPU. Several programs that each
keep their weights' worth (four 40 GB programs on a 128 GB host) would exhaust the
host, so after a restore the cache is emptied when the host runs short
(``keep_pinned``: None = decide by /proc/meminfo, True = always keep, False = never).
"""

from __future__ import annotations

import functools
import gc
import itertools
import time
from typing import Any

import torch

from acbslurm.values import field, mutable


@mutable
class EvictStats:
    evictions: int = 0
    restores: int = 0
    bytes_evicted: int = 0
    bytes_restored: int = 0
    evict_seconds: float = 0.0
    restore_seconds: float = 0.0
    host_cache_emptied: int = 0

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@mutable
class _Saved:
    storage: Any  # torch.UntypedStorage, the very object the tensors share
    host: torch.Tensor  # uint8 copy of its bytes


# type.__subclasscheck__ itself (C, a walk of the MRO), so no metaclass's Python runs
_IS_TENSOR_TYPE = functools.partial(type.__subclasscheck__, torch.Tensor)


def live_tensors() -> list[torch.Tensor]:
    """Every live tensor the garbage collector tracks, found without one Python step.

    CPython grows the tuple of ``tuple(generator)`` in place (``_PyTuple_Resize``), and
    refuses with ``SystemError: bad argument to internal function`` if anything else
    holds it meanwhile; but the collector tracks it from the start, so
    ``gc.get_objects()`` returns it (CPython gh-39117, gh-107137). A scan in Python on
    this thread lets the main thread run between its steps while the list is held, and
    the program's next such tuple breaks: agarun's test died so, importing torch._dynamo.

    Here the list is made, filtered and freed within one call of C code that never
    gives up the GIL and runs no Python code, so no other thread runs until it is gone.
    Each object comes twice in a row (``repeat(obj, 2)``): ``compress`` takes the first
    as the datum and the second, through ``type`` and ``type.__subclasscheck__``, as its
    selector. (``tee`` would pair them too, but its buffer kept references after the
    scan and the test of this failed with it.) Attributes are never read: ``isinstance``
    reads ``__class__``, which some objects compute in Python. The collector is off
    meanwhile because a collection may run a finalizer written in Python.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        objects = itertools.chain.from_iterable(map(gc.get_objects, (None,)))
        twice = itertools.chain.from_iterable(map(itertools.repeat, objects, itertools.repeat(2)))
        return list(itertools.compress(twice, map(_IS_TENSOR_TYPE, map(type, twice))))
    finally:
        if enabled:
            gc.enable()


HOST_FLOOR = 0.5  # keep cached pinned memory only while half the host's memory is available
MEMINFO = "/proc/meminfo"


def host_memory() -> tuple[int, int]:
    """(total, available) bytes of the host from /proc/meminfo; (0, 0) when unknown."""
    found: dict[str, int] = {}
    try:
        with open(MEMINFO) as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("MemTotal", "MemAvailable"):
                    found[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return 0, 0
    return found.get("MemTotal", 0), found.get("MemAvailable", 0)


def host_memory_short(floor: float = HOST_FLOOR) -> bool:
    total, available = host_memory()
    return total > 0 and available < floor * total


def empty_host_cache() -> bool:
    """Give PyTorch's cached pinned host memory back to the system (CUDA builds)."""
    empty = getattr(torch._C, "_host_emptyCache", None)
    if empty is None:
        return False
    empty()
    return True


@mutable
class StorageEvictor:
    """Evict/restore all live tensors of one device (``cpu`` stands in for a GPU in tests)."""

    device: torch.device
    stats: EvictStats = field(default_factory=EvictStats)
    saved: list[_Saved] = field(default_factory=list)
    keep_pinned: bool | None = None  # see the module's docstring

    @property
    def evicted(self) -> bool:
        return bool(self.saved)

    def _plain_storage(self, obj: torch.Tensor) -> Any:
        """The storage of a strided tensor on the device; None for any other."""
        mine = self.device
        try:
            d = obj.device
            if d.type != mine.type or (
                mine.index is not None and d.index not in (None, mine.index)
            ):
                return None  # on another device
            if obj.layout != torch.strided or obj.is_meta:
                return None
            return obj.untyped_storage()
        except (RuntimeError, NotImplementedError):
            return None  # tensor subclasses / wrappers without a plain storage

    def live_storages(self, exclude: set[int] | None = None) -> list[Any]:
        """Unique resizable storages of live tensors on the device (largest first)."""
        seen: dict[int, Any] = {}
        skip = exclude or set()
        for obj in live_tensors():
            st = self._plain_storage(obj)
            if st is None:
                continue
            key = st._cdata
            if key in seen or key in skip or st.nbytes() == 0 or not st.resizable():
                continue
            seen[key] = st
        return sorted(seen.values(), key=lambda s: -s.nbytes())

    def evict(self, storages: list[Any] | None = None) -> int:
        """Copy out and free the storages (default: every live one); returns bytes freed."""
        if self.saved:
            return 0
        t0 = time.perf_counter()
        cuda = self.device.type == "cuda"
        if storages is None:
            storages = self.live_storages()
        saved = []
        for st in storages:
            n = st.nbytes()
            host = torch.empty(n, dtype=torch.uint8, pin_memory=cuda)
            host.copy_(_bytes_view(st), non_blocking=cuda)
            saved.append(_Saved(st, host))
        if cuda:
            torch.cuda.synchronize(self.device)
        freed = 0
        for s in saved:
            s.storage.resize_(0)
            freed += s.host.numel()
        if cuda:
            torch.cuda.empty_cache()  # give the memory back to the driver for the next client
        self.saved = saved
        self.stats.evictions += 1
        self.stats.bytes_evicted += freed
        self.stats.evict_seconds += time.perf_counter() - t0
        return freed

    def restore(self) -> int:
        """Re-allocate the evicted storages in place and copy their bytes back."""
        if not self.saved:
            return 0
        t0 = time.perf_counter()
        cuda = self.device.type == "cuda"
        total = 0
        for s in self.saved:
            n = s.host.numel()
            s.storage.resize_(n)
            _bytes_view(s.storage).copy_(s.host, non_blocking=cuda)
            total += n
        if cuda:
            torch.cuda.synchronize(self.device)
        self.saved = []  # the pinned blocks go back to PyTorch's host cache
        if cuda and self._release_pinned():
            self.stats.host_cache_emptied += 1
        self.stats.restores += 1
        self.stats.bytes_restored += total
        self.stats.restore_seconds += time.perf_counter() - t0
        return total

    def _release_pinned(self) -> bool:
        if self.keep_pinned is True:
            return False
        if self.keep_pinned is None and not host_memory_short():
            return False
        return empty_host_cache()


def _bytes_view(storage: Any) -> torch.Tensor:
    """A uint8 tensor over all of ``storage`` (a fresh tensor: no one's version counter)."""
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)
