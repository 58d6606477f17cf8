"""The client library: a session with the broker, leases, and the manual API.

    from acbslurm.broker.client import BrokerClient

    with BrokerClient() as client:                  # address: ACBSLURM_BROKER_ADDRESS, ...
        with client.gpus(1, memory="20G") as devices:
            run_on(devices[0].id)                   # a GPU UUID (or cpuN)

    lease = client.acquire(2, timeout=30)           # the same, by hand
    ...
    client.release(lease)

The session is one gRPC stream: closing the client, or the process dying, frees
every lease it holds. On the broker's host the client moves its requests and their
answers to the session's local lane (``lane_client``; ``ACBSLURM_BROKER_LANE=0`` or
``lane=False`` keeps it on gRPC), which cuts a grant's cost several times over.
Programs that keep data on a device between leases install an eviction handler
(``on_evict``) and report what stays resident at release.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import grpc

from acbslurm.broker.address import check_address, default_address, socket_path
from acbslurm.broker.lane_client import Lane, LaneClosed, lane_wanted
from acbslurm.broker.proto import pb, pb_grpc
from acbslurm.errors import BrokerError, ConfigError
from acbslurm.jobsockets import lane_path
from acbslurm.units import size_bytes

log = logging.getLogger(__name__)

_STOP = object()
CANCEL_ANSWER_WAIT = 2.0  # s a timed-out acquire waits to learn whether a grant raced it


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
    # The caller gave up (timeout): a grant that still comes is handed straight back.
    abandoned: bool = False


def _memory_bytes(memory: str | int | None) -> int:
    if memory is None:
        return 0
    try:
        return size_bytes(memory)
    except ValueError as exc:
        raise ConfigError(f"memory hint: {exc}") from None


class BrokerClient:
    """One registered session with a broker (thread-safe)."""

    def __init__(
        self,
        address: str | None = None,
        name: str | None = None,
        connect_timeout: float = 5.0,
        lane: bool | None = None,
    ) -> None:
        self.address = check_address(address or default_address())
        self.name = name or os.path.basename(sys.argv[0] or "python")
        # The session belongs to this process: a forked child shares its sockets but not
        # its threads, so it must neither use nor close them (``_check_process``).
        self._pid = os.getpid()
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
        self._leases: dict[int, Lease] = {}
        # Yields asked for leases whose grant (on the lane) this client has not read yet.
        self._early_yields: set[int] = set()
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
        self._lane: Lane | None = None
        # Whoever waits for a grant reads the lane; one reader at a time (the others
        # wait on this condition until their answer was read for them).
        self._lane_turn = threading.Condition(threading.Lock())
        self._lane_reading = False
        # The lane sits beside the socket this client reached (the broker's own path
        # may differ, e.g. seen from a container with the directory mounted elsewhere).
        mine = socket_path(self.address)
        if reg.lane_path and mine and (lane_wanted() if lane is None else lane):
            try:
                self._lane = Lane(lane_path(mine), self.client_id, reg.lane_token)
            except (OSError, LaneClosed) as exc:
                log.debug("no local lane beside %s (%s); staying on gRPC", mine, exc)
        self._reader = threading.Thread(target=self._read, name="broker-reader", daemon=True)
        self._reader.start()

    @property
    def on_lane(self) -> bool:
        """Whether this session's requests travel on the local lane."""
        return self._lane is not None

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
        self._send(pb.ClientMessage(request=req))
        if not self._wait(slot, timeout):
            with self._lock:
                slot.abandoned = not slot.done.is_set()
            if slot.abandoned:
                self._send(pb.ClientMessage(cancel=pb.Cancel(request_id=rid)))
                if self._lane is not None:
                    # The answer to the cancel (or a grant that raced it) comes on the
                    # lane, which only callers read: read it now, or a raced grant would
                    # keep the device leased to nobody's use.
                    self._wait(slot, CANCEL_ANSWER_WAIT)
                raise BrokerError(f"no {count} device(s) granted within {timeout:g}s")
        if slot.error:
            raise BrokerError(slot.error)
        assert slot.lease is not None
        return slot.lease

    def release(self, lease: Lease, resident: dict[str, int] | None = None) -> None:
        """Give the lease back; ``resident`` = bytes this client leaves on each device."""
        self._check_process()
        with self._lock:
            if lease.released or self._closed or self._lost:
                # A lost session's leases were freed by the broker when it ended.
                lease.released = True
                return
            lease.released = True
            self._leases.pop(lease.lease_id, None)
        rel = pb.Release(lease_id=lease.lease_id)
        for dev, nbytes in (resident or {}).items():
            rel.resident.add(device=dev, bytes=nbytes)
        with contextlib.suppress(BrokerError):  # lost just now: freed with the session
            self._send(pb.ClientMessage(release=rel))

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
        if os.getpid() != self._pid:
            return  # a forked child's copy: the session stays the parent's
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._out.put(_STOP)
        if self._lane is not None:
            self._lane.close()
        self._call.cancel()
        self._channel.close()
        self._worker.shutdown(wait=False)

    def __enter__(self) -> BrokerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------------

    def _check_process(self) -> None:
        if os.getpid() != self._pid:
            raise BrokerError(
                f"this broker client belongs to process {self._pid}; a forked child "
                f"(pid {os.getpid()}) must open its own BrokerClient"
            )

    def _check_open(self) -> None:
        self._check_process()
        if self._lost:
            raise BrokerError(self._lost)
        if self._closed:
            raise BrokerError("the broker client is closed")

    def _send(self, msg: Any) -> None:
        if self._lane is None:
            self._out.put(msg)
            return
        try:
            self._lane.send(msg)
        except OSError:
            self._lose(f"lost the broker at {self.address} (its lane closed)")
            raise BrokerError(self._lost) from None

    def _wait(self, slot: _Pending, timeout: float | None) -> bool:
        """Wait until ``slot`` is answered; False after ``timeout`` s."""
        if self._lane is None:
            return slot.done.wait(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        while not slot.done.is_set():
            left = None if deadline is None else deadline - time.monotonic()
            with self._lane_turn:
                while self._lane_reading and not slot.done.is_set():
                    if left is not None and left <= 0:
                        return False
                    self._lane_turn.wait(left)
                    left = None if deadline is None else deadline - time.monotonic()
                if slot.done.is_set():
                    break
                if left is not None and left <= 0:
                    return False
                self._lane_reading = True
            msg = None
            try:
                msg = self._lane.recv(left)
            except (OSError, LaneClosed):
                self._lose(f"lost the broker at {self.address} (its lane closed)")
            finally:
                if msg is not None:
                    self._dispatch(msg)
                with self._lane_turn:
                    self._lane_reading = False
                    self._lane_turn.notify_all()
        return True

    def _read(self) -> None:
        try:
            for msg in self._call:
                self._dispatch(msg)
            reason = "the broker ended the session"
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            reason = f"lost the broker at {self.address} ({code})"
        self._lose(reason)

    def _lose(self, reason: str) -> None:
        """The session is gone (or closed): fail every waiting acquire."""
        with self._lock:
            first = not (self._closed or self._lost)
            if first:
                self._lost = reason
            error = self._lost or "the broker client is closed"
            pending = list(self._pending.values())
            self._pending.clear()
        for slot in pending:
            slot.error = error
            slot.done.set()
        if self._lane is not None:
            with self._lane_turn:
                self._lane_turn.notify_all()
        if first:
            log.warning("%s", reason)

    def _dispatch(self, msg: Any) -> None:
        kind = msg.WhichOneof("kind")
        if kind == "granted":
            g = msg.granted
            lease = Lease(g.lease_id, [DeviceInfo.from_pb(d) for d in g.devices])
            with self._lock:
                slot = self._pending.pop(g.request_id, None)
                if slot is not None and not slot.abandoned:
                    self._leases[lease.lease_id] = lease
                    if lease.lease_id in self._early_yields:
                        self._early_yields.discard(lease.lease_id)
                        lease.yield_requested.set()
                    slot.lease = lease
                    slot.done.set()
                    return
            # Granted after the caller gave up waiting: hand it straight back.
            with contextlib.suppress(BrokerError):
                self._send(pb.ClientMessage(release=pb.Release(lease_id=g.lease_id)))
            if slot is not None:
                slot.done.set()
        elif kind == "rejected":
            r = msg.rejected
            with self._lock:
                slot = self._pending.pop(r.request_id, None)
            if slot is not None:
                if not slot.abandoned:
                    slot.error = f"broker rejected the request: {r.reason}"
                slot.done.set()
        elif kind == "yield_asked":
            lid = msg.yield_asked.lease_id
            with self._lock:
                held = self._leases.get(lid)
                if held is None and self._lane is not None:
                    # The stream can overtake the lane: the grant may still be unread.
                    if len(self._early_yields) > 1024:
                        self._early_yields.clear()  # leases released before the ask came
                    self._early_yields.add(lid)
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
                self._send(pb.ClientMessage(evict_done=pb.EvictDone(devices=devices)))
