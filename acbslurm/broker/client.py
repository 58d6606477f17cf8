"""The client library: a session with the broker, leases, and the manual API.

    from acbslurm.broker.client import BrokerClient

    with BrokerClient() as client:                  # address: ACBSLURM_BROKER_ADDRESS, ...
        with client.gpus(1, memory="20G") as devices:
            run_on(devices[0].id)                   # a GPU UUID (or cpuN)

    lease = client.acquire(2, timeout=30)           # the same, by hand
    ...
    client.release(lease)

The session is one gRPC stream: closing the client, or the process dying, frees
every lease it holds. Programs that keep data on a device between leases install
an eviction handler (``on_evict``) and report what stays resident at release.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import queue
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import grpc

from acbslurm.broker.address import default_address, parse_address
from acbslurm.broker.devices import parse_size
from acbslurm.broker.proto import pb, pb_grpc
from acbslurm.errors import BrokerError, ConfigError

log = logging.getLogger(__name__)

_STOP = object()


@dataclass(frozen=True)
class DeviceInfo:
    id: str
    name: str
    memory_total: int
    minor: int
    index: int

    @classmethod
    def from_pb(cls, d: Any) -> DeviceInfo:
        return cls(d.id, d.name, d.memory_total, d.minor, d.index)


@dataclass
class Lease:
    lease_id: int
    devices: list[DeviceInfo]
    # Set when the broker asks this holder to give the devices back at its next pause.
    yield_requested: threading.Event = field(default_factory=threading.Event)
    released: bool = False

    @property
    def device_ids(self) -> list[str]:
        return [d.id for d in self.devices]


@dataclass
class _Pending:
    done: threading.Event = field(default_factory=threading.Event)
    lease: Lease | None = None
    error: str = ""


def _memory_bytes(memory: str | int | None) -> int:
    if memory is None:
        return 0
    try:
        return parse_size(memory)
    except ValueError as exc:
        raise ConfigError(f"memory hint: {exc}") from None


class BrokerClient:
    """One registered session with a broker (thread-safe)."""

    def __init__(
        self,
        address: str | None = None,
        name: str | None = None,
        connect_timeout: float = 5.0,
    ) -> None:
        self.address = parse_address(address or default_address())
        self.name = name or os.path.basename(sys.argv[0] or "python")
        self._channel = grpc.insecure_channel(self.address)
        try:
            grpc.channel_ready_future(self._channel).result(timeout=connect_timeout)
        except grpc.FutureTimeoutError:
            self._channel.close()
            raise BrokerError(
                f"no GPU broker answers at {self.address} within {connect_timeout:g}s "
                "(start one with `acbslurm broker serve`, or set ACBSLURM_BROKER_ADDRESS)"
            ) from None
        self._out: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._pending: dict[int, _Pending] = {}
        self._cancelled: set[int] = set()
        self._leases: dict[int, Lease] = {}
        self._ids = itertools.count(1)
        self._closed = False
        self._lost = ""
        self._evict_handler: Callable[[list[str]], None] | None = None
        self._yield_handler: Callable[[Lease], None] | None = None
        # Handlers run here, not on the reader thread, so grants keep flowing meanwhile.
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="broker-client")
        stub = pb_grpc.GpuBrokerStub(self._channel)
        self._call = stub.Session(iter(self._out.get, _STOP))
        self._out.put(pb.ClientMessage(register=pb.Register(name=self.name, pid=os.getpid())))
        try:
            first = next(self._call)
        except grpc.RpcError as exc:
            self._channel.close()
            raise BrokerError(f"broker at {self.address} refused the session: {exc}") from None
        reg = first.registered
        self.client_id: int = reg.client_id
        self.policy: str = reg.policy
        self.devices = [DeviceInfo.from_pb(d) for d in reg.devices]
        self._reader = threading.Thread(target=self._read, name="broker-reader", daemon=True)
        self._reader.start()

    # -- public API --------------------------------------------------------------------

    def acquire(
        self,
        count: int = 1,
        memory: str | int | None = None,
        timeout: float | None = None,
        pin: list[str] | None = None,
    ) -> Lease:
        """Wait for ``count`` devices (all at once); raise BrokerError after ``timeout`` s."""
        rid = next(self._ids)
        slot = _Pending()
        with self._lock:
            self._check_open()
            self._pending[rid] = slot
        req = pb.Request(request_id=rid, count=count, memory_bytes=_memory_bytes(memory))
        req.pin.extend(pin or [])
        self._out.put(pb.ClientMessage(request=req))
        if not slot.done.wait(timeout):
            with self._lock:
                if not slot.done.is_set():
                    self._pending.pop(rid, None)
                    self._cancelled.add(rid)
                    self._out.put(pb.ClientMessage(cancel=pb.Cancel(request_id=rid)))
                    raise BrokerError(f"no {count} device(s) granted within {timeout:g}s")
        if slot.error:
            raise BrokerError(slot.error)
        assert slot.lease is not None
        return slot.lease

    def release(self, lease: Lease, resident: dict[str, int] | None = None) -> None:
        """Give the lease back; ``resident`` = bytes this client leaves on each device."""
        with self._lock:
            if lease.released or self._closed:
                lease.released = True
                return
            lease.released = True
            self._leases.pop(lease.lease_id, None)
        rel = pb.Release(lease_id=lease.lease_id)
        for dev, nbytes in (resident or {}).items():
            rel.resident.add(device=dev, bytes=nbytes)
        self._out.put(pb.ClientMessage(release=rel))

    @contextlib.contextmanager
    def gpus(
        self, count: int = 1, memory: str | int | None = None, timeout: float | None = None
    ) -> Iterator[list[DeviceInfo]]:
        """``with client.gpus(1, memory="20G") as devices:`` holds a lease for the block."""
        lease = self.acquire(count, memory=memory, timeout=timeout)
        try:
            yield lease.devices
        finally:
            self.release(lease)

    def on_evict(self, handler: Callable[[list[str]], None] | None) -> None:
        """Call ``handler(device_ids)`` when another client needs this client's memory.

        The broker waits until the handler returns (then it is told the data are gone).
        """
        self._evict_handler = handler

    def on_yield(self, handler: Callable[[Lease], None] | None) -> None:
        """Call ``handler(lease)`` when the broker asks this holder to yield."""
        self._yield_handler = handler

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._out.put(_STOP)
        self._call.cancel()
        self._channel.close()
        self._worker.shutdown(wait=False)

    def __enter__(self) -> BrokerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._lost:
            raise BrokerError(self._lost)
        if self._closed:
            raise BrokerError("the broker client is closed")

    def _read(self) -> None:
        try:
            for msg in self._call:
                self._dispatch(msg)
            reason = "the broker ended the session"
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            reason = f"lost the broker at {self.address} ({code})"
        with self._lock:
            if self._closed:
                return
            self._lost = reason
            pending = list(self._pending.values())
            self._pending.clear()
        for slot in pending:
            slot.error = reason
            slot.done.set()
        log.warning("%s", reason)

    def _dispatch(self, msg: Any) -> None:
        kind = msg.WhichOneof("kind")
        if kind == "granted":
            g = msg.granted
            lease = Lease(g.lease_id, [DeviceInfo.from_pb(d) for d in g.devices])
            with self._lock:
                slot = self._pending.pop(g.request_id, None)
                if slot is not None:
                    self._leases[lease.lease_id] = lease
                    slot.lease = lease
                    slot.done.set()
                    return
                self._cancelled.discard(g.request_id)
            # Granted after the caller gave up waiting: hand it straight back.
            self._out.put(pb.ClientMessage(release=pb.Release(lease_id=g.lease_id)))
        elif kind == "rejected":
            r = msg.rejected
            with self._lock:
                slot = self._pending.pop(r.request_id, None)
            if slot is not None:
                slot.error = f"broker rejected the request: {r.reason}"
                slot.done.set()
        elif kind == "yield_asked":
            with self._lock:
                held = self._leases.get(msg.yield_asked.lease_id)
            if held is not None:
                held.yield_requested.set()
                if self._yield_handler is not None:
                    self._worker.submit(self._yield_handler, held)
        elif kind == "evict":
            devices = list(msg.evict.devices)
            self._worker.submit(self._evict, devices)

    def _evict(self, devices: list[str]) -> None:
        try:
            if self._evict_handler is not None:
                self._evict_handler(devices)
        except Exception:
            log.exception("eviction handler failed")
        finally:
            # Even a failed handler must answer, or the device stays blocked.
            with contextlib.suppress(Exception):
                self._out.put(pb.ClientMessage(evict_done=pb.EvictDone(devices=devices)))
