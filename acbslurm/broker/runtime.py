"""agarun's in-process runtime: PyTorch device work happens only under a broker lease.

A global ``TorchFunctionMode`` sees every PyTorch call of the program's main thread.
A call that touches the managed device (any CUDA tensor or ``device="cuda"``; in CPU
stand-in mode, every call) first makes sure a lease is held, restoring the
program's evicted storages if needed. A watcher thread gives the lease back when
the program has made no device call for ``idle`` seconds (its CPU or I/O phase) or
at the first pause after the broker asked it to yield. When the broker asks for
the memory, the program's storages are evicted (``evict.StorageEvictor``).

Locking: ``_lock`` guards the lease and the storages; it is never held while waiting
for the broker, so an eviction request can always be served while a grant is awaited.

A forked child (a DataLoader worker, say) inherits the mode but is no session of the
broker: its PyTorch calls run unmanaged (CUDA cannot be used after a fork anyway).

Losing the broker voids the lease (``Lease.valid``): the device call under way ends,
and the next one gives the void lease back and waits in ``acquire`` until the client
has registered again with a (restarted) broker and been granted. Meanwhile the data
stay on the device, declared to the new broker, which has them evicted (after that
call ended) before anyone else gets the memory. A broker that never comes back ends
the program with one line, ``agarun: error: ...``, at its next device call.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import sys
import threading
import time
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from acbslurm.broker.client import BrokerClient, Lease
from acbslurm.broker.evict import StorageEvictor
from acbslurm.errors import BrokerError

log = logging.getLogger(__name__)


class DeviceRuntime:
    def __init__(
        self,
        client: BrokerClient,
        device_type: str = "cuda",
        memory: int = 0,
        idle: float = 0.05,
    ) -> None:
        self.client = client
        self.device_type = device_type
        self.memory = memory
        self.idle = idle
        self._lock = threading.Lock()
        self._lease: Lease | None = None
        self._device_id: str | None = None  # the broker device our data live on
        self._in_op = 0
        self._last = time.monotonic()
        self._stopping = threading.Event()
        self.evictor: StorageEvictor | None = None
        self.leases = 0
        self.yields = 0
        self.wait_seconds = 0.0
        self._forked = False
        os.register_at_fork(after_in_child=self._after_fork)
        client.on_evict(self._evict)
        self._watcher = threading.Thread(target=self._watch, name="agarun-idle", daemon=True)
        self._watcher.start()

    # -- called around every device call (main thread) ----------------------------------

    @property
    def forked(self) -> bool:
        """True in a forked child, where the runtime stands aside."""
        return self._forked

    def _after_fork(self) -> None:
        self._forked = True
        self._lock = threading.Lock()  # the parent's may have been held by another thread

    def enter(self) -> None:
        if self._forked:
            return
        while True:
            with self._lock:
                lease = self._lease
                if lease is not None and not lease.valid:
                    # Lost with the broker: stop here; what we leave is still declared.
                    self._release_locked()
                    lease = None
                if lease is not None and not (lease.yield_requested.is_set() and self._in_op == 0):
                    self._in_op += 1
                    return
                if lease is not None:  # asked to yield: this pause is the safe point
                    self._release_locked()
                    self.yields += 1
            self._acquire()

    def exit(self) -> None:
        if self._forked:
            return
        with self._lock:
            self._in_op -= 1
            self._last = time.monotonic()

    def _acquire(self) -> None:
        t0 = time.monotonic()
        pin = [self._device_id] if self._device_id else None
        try:
            lease = self.client.acquire(1, memory=self.memory, pin=pin)
        except BrokerError as exc:
            # One clear line instead of a traceback out of the program's PyTorch call.
            print(f"agarun: error: {exc}", file=sys.stderr, flush=True)
            raise SystemExit(exc.exit_code) from None
        self.wait_seconds += time.monotonic() - t0
        with self._lock:
            if self._lease is not None:  # cannot happen: one main thread; be safe
                self.client.release(lease)
                return
            self._lease = lease
            self.leases += 1
            if self._device_id is None:
                self._bind(lease.devices[0].id)
            if self.evictor is not None and self.evictor.evicted:
                self.evictor.restore()
            # Not idle: the wait for the grant must not count, or the watcher could
            # hand the lease back before the call that asked for it has run.
            self._last = time.monotonic()

    def _bind(self, device_id: str) -> None:
        """Remember the first device granted; on GPUs make it the current CUDA device."""
        self._device_id = device_id
        if self.device_type == "cuda":
            ordinal = _cuda_ordinal(device_id)
            torch.cuda.set_device(ordinal)
            self.evictor = StorageEvictor(torch.device("cuda", ordinal))
        else:
            self.evictor = StorageEvictor(torch.device("cpu"))

    def _release_locked(self) -> None:
        lease, self._lease = self._lease, None
        if lease is None or self._device_id is None:
            return
        if self.device_type == "cuda" and self.evictor is not None:
            resident = int(torch.cuda.memory_reserved(self.evictor.device)) or 1
        else:  # CPU stand-in: the hint (any positive value marks residency)
            resident = self.memory or 1
        self.client.release(lease, resident={self._device_id: resident})

    # -- background ---------------------------------------------------------------------

    def _watch(self) -> None:
        tick = max(self.idle / 4, 0.001)
        while not self._stopping.wait(tick):
            with self._lock:
                lease = self._lease
                if lease is None or self._in_op:
                    continue
                if not lease.valid:  # lost with the broker: let its eviction go ahead
                    self._release_locked()
                elif lease.yield_requested.is_set():
                    self.yields += 1
                    self._release_locked()
                elif time.monotonic() - self._last >= self.idle:
                    self._release_locked()

    def _evict(self, devices: list[str]) -> None:
        # Runs on the client's worker thread; the broker waits for it to finish.
        with self._lock:
            if self._lease is not None or self.evictor is None or self._device_id not in devices:
                return  # we hold the device again (granted meanwhile): nothing to move
            self.evictor.evict()

    def stats(self) -> dict[str, Any]:
        ev = self.evictor.stats.as_dict() if self.evictor else {}
        return {
            "leases": self.leases,
            "yields": self.yields,
            "wait_seconds": round(self.wait_seconds, 4),
            "reconnects": self.client.reconnects,
            "device": self._device_id,
            **ev,
        }

    def close(self) -> None:
        if self._forked:
            return  # the parent's session: not ours to end
        self._stopping.set()
        with self._lock:
            self._release_locked()
        self.client.close()


def _cuda_ordinal(uuid: str) -> int:
    want = uuid.removeprefix("GPU-").removeprefix("MIG-")
    for i in range(torch.cuda.device_count()):
        if str(torch.cuda.get_device_properties(i).uuid) == want:
            return i
    # The program's own CUDA_VISIBLE_DEVICES can hide it: the user's to fix, so in the tree.
    raise BrokerError(
        f"GPU {uuid} granted by the broker is not visible to this process "
        f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')!r})"
    )


class LeaseMode(TorchFunctionMode):
    """Wrap every PyTorch call that touches the device in ``runtime.enter/exit``."""

    def __init__(self, runtime: DeviceRuntime) -> None:
        super().__init__()
        self.runtime = runtime
        self.all_calls = runtime.device_type == "cpu"

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if not (self.all_calls or _touches_cuda(args, kwargs)):
            return func(*args, **kwargs)
        self.runtime.enter()
        try:
            return func(*args, **kwargs)
        finally:
            self.runtime.exit()


def _touches_cuda(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    leaves, _ = tree_flatten((args, kwargs))
    for x in leaves:
        if isinstance(x, torch.Tensor):
            if x.is_cuda:
                return True
        elif isinstance(x, torch.device):
            if x.type == "cuda":
                return True
        elif isinstance(x, str) and x.startswith("cuda"):
            return True
    return False


def install(
    client: BrokerClient,
    device_type: str,
    memory: int = 0,
    idle: float = 0.05,
    stats_file: str = "",
) -> DeviceRuntime:
    """Start the runtime and push the mode for the calling (main) thread, for good."""
    runtime = DeviceRuntime(client, device_type, memory, idle)
    LeaseMode(runtime).__enter__()  # type: ignore[no-untyped-call]

    def finish() -> None:
        if runtime.forked:
            return  # a forked child that exits normally: the parent reports
        runtime.close()
        if stats_file:
            with open(stats_file, "w") as f:
                json.dump(runtime.stats(), f)

    atexit.register(finish)
    return runtime
