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

Losing the broker (it was killed or restarted): every lease of the lost session is
void at once (``lease.valid`` turns False) and the program must stop using its
devices and ``release()`` such leases. The client reconnects in the background for
up to ``reconnect_timeout`` seconds and registers again with the same session key,
declaring the memory it still holds (what it reported resident at its releases, and
all of every device of a lease it has not released yet), so that a restarted broker
grants those devices to nobody before it has asked this client to evict. Waiting
``acquire()`` calls are sent again to the new broker and go on waiting; an eviction
of a device of a void lease waits until the program has released that lease. Only
when no broker comes back in time do waiters fail with ``BrokerError``.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import queue
import secrets
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
from acbslurm.config import env_float
from acbslurm.errors import BrokerError, ConfigError
from acbslurm.jobsockets import lane_path
from acbslurm.units import size_bytes

log = logging.getLogger(__name__)

_STOP = object()
CANCEL_ANSWER_WAIT = 2.0  # s a timed-out acquire waits to learn whether a grant raced it
RECONNECT_TIMEOUT = 30.0  # s a client tries to get its broker back after losing it
RECONNECT_ENV = "ACBSLURM_BROKER_RECONNECT_TIMEOUT"
DOWN_POLL = 0.02  # s between looks for a new lane while the broker is away
UP_POLL = 0.5  # the same, for a waiter answered by the reader thread (no lane)
# Notice a broker that comes back quickly (gRPC's default first backoff is 1 s).
_CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.min_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 500),
]


@dataclass(frozen=True)
class DeviceInfo:
    id: str
    name: str
    memory_total: int
    minor: int
    index: int
    node: str = ""  # the Slurm node; "" = the broker's own

    @classmethod
    def from_pb(cls, d: Any) -> DeviceInfo:
        return cls(d.id, d.name, d.memory_total, d.minor, d.index, d.node)


@dataclass
class Lease:
    lease_id: int
    devices: list[DeviceInfo]
    # Set when the broker asks this holder to give the devices back at its next pause.
    yield_requested: threading.Event = field(default_factory=threading.Event)
    released: bool = False
    # Its session was lost with the broker: the devices are no longer this program's.
    lost: bool = False

    @property
    def device_ids(self) -> list[str]:
        return [d.id for d in self.devices]

    @property
    def valid(self) -> bool:
        """True while the devices are this program's: not released, session not lost."""
        return not self.released and not self.lost


@dataclass
class _Pending:
    done: threading.Event = field(default_factory=threading.Event)
    lease: Lease | None = None
    error: str = ""
    # The caller gave up (timeout): a grant that still comes is handed straight back.
    abandoned: bool = False
    request: Any = None  # the pb.Request, sent again after a reconnect


@dataclass
class _Session:
    """One registered session (a reconnect makes a new one)."""

    channel: grpc.Channel
    call: Any
    out: queue.SimpleQueue[Any]
    registered: Any
    lane: Lane | None


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
        reconnect_timeout: float | None = None,
    ) -> None:
        self.address = check_address(address or default_address())
        self.name = name or os.path.basename(sys.argv[0] or "python")
        if reconnect_timeout is None:
            reconnect_timeout = env_float(RECONNECT_ENV, RECONNECT_TIMEOUT)
        self.reconnect_timeout = reconnect_timeout
        self.reconnects = 0  # broker sessions regained after losing the broker
        # The session belongs to this process: a forked child shares its sockets but not
        # its threads, so it must neither use nor close them (``_check_process``).
        self._pid = os.getpid()
        # Repeated at every registration: a restarted broker waits for the keys it knew.
        self._session_key = secrets.token_hex(16)
        self._want_lane = lane_wanted() if lane is None else lane
        self._lock = threading.Lock()
        # Notified when a void lease is released, and when the session comes back.
        self._changed = threading.Condition(self._lock)
        self._pending: dict[int, _Pending] = {}
        self._leases: dict[int, Lease] = {}
        self._lost_leases: dict[int, Lease] = {}  # void, not yet released by the program
        self._resident: dict[str, int] = {}  # bytes reported left on each device
        # Yields asked for leases whose grant (on the lane) this client has not read yet.
        self._early_yields: set[int] = set()
        self._ids = itertools.count(1)
        self._closed = False
        self._lost = ""  # set for good: the broker did not come back
        self._up = False  # a session is registered and not known to be lost
        self._gen = 0  # which session messages belong to (grants of a lost one are void)
        self._evict_handler: Callable[[list[str]], None] | None = None
        self._yield_handler: Callable[[Lease], None] | None = None
        # Whoever waits for a grant reads the lane; one reader at a time (the others
        # wait on this condition until their answer was read for them).
        self._lane_turn = threading.Condition(threading.Lock())
        self._lane_reading = False
        sess = self._open_session(connect_timeout, rejoin=False)
        self._install(sess)
        # Handlers run here, not on the reader thread, so grants keep flowing meanwhile.
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="broker-client")
        self._reader = threading.Thread(target=self._read, name="broker-reader", daemon=True)
        self._reader.start()

    def _open_session(self, timeout: float, rejoin: bool) -> _Session:
        """Connect and register (again, with ``rejoin``); BrokerError when that fails."""
        if rejoin:
            check_address(self.address)  # the socket may have been taken meanwhile
        channel = grpc.insecure_channel(self.address, options=_CHANNEL_OPTIONS)
        try:
            grpc.channel_ready_future(channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            channel.close()
            raise BrokerError(
                f"no GPU broker answers at {self.address} within {timeout:g}s "
                "(start one with `acbslurm broker serve`, or set ACBSLURM_BROKER_ADDRESS)"
            ) from None
        out: queue.SimpleQueue[Any] = queue.SimpleQueue()
        call = pb_grpc.GpuBrokerStub(channel).Session(iter(out.get, _STOP))
        reg = pb.Register(name=self.name, pid=os.getpid(), session=self._session_key)
        if rejoin:
            reg.rejoin = True
            for dev, nbytes in self._still_held().items():
                reg.resident.add(device=dev, bytes=nbytes)
        out.put(pb.ClientMessage(register=reg))
        try:
            first = next(call)
        except (grpc.RpcError, StopIteration) as exc:
            out.put(_STOP)
            channel.close()
            raise BrokerError(f"broker at {self.address} refused the session: {exc}") from None
        registered = first.registered
        lane: Lane | None = None
        # The lane sits beside the socket this client reached (the broker's own path
        # may differ, e.g. seen from a container with the directory mounted elsewhere).
        mine = socket_path(self.address)
        if registered.lane_path and mine and self._want_lane:
            try:
                lane = Lane(lane_path(mine), registered.client_id, registered.lane_token)
            except (OSError, LaneClosed) as exc:
                log.debug("no local lane beside %s (%s); staying on gRPC", mine, exc)
        return _Session(channel, call, out, registered, lane)

    def _install(self, sess: _Session) -> None:
        reg = sess.registered
        self._session = sess
        self._channel = sess.channel
        self._call = sess.call
        self._out = sess.out
        self._lane: Lane | None = sess.lane
        self.client_id: int = reg.client_id
        self.policy: str = reg.policy
        self.devices = [DeviceInfo.from_pb(d) for d in reg.devices]
        self._gen += 1
        self._up = True

    def _still_held(self) -> dict[str, int]:
        """What to declare when registering again: reported residency, and all of the
        devices of void leases the program has not released yet."""
        with self._lock:
            held = dict(self._resident)
            total = {d.id: d.memory_total for d in self.devices}
            for lease in self._lost_leases.values():
                for dev in lease.device_ids:
                    held[dev] = max(total.get(dev, 0), 1)
        return held

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
        per_node: int = 0,
    ) -> Lease:
        """Wait for ``count`` devices (all at once); raise BrokerError after ``timeout`` s.

        While the broker is away (lost, being reconnected) the request waits for the
        new broker; it fails only when no broker comes back within the reconnect time.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            lease = self._acquire_once(count, memory, left, timeout, pin, per_node)
            if not lease.lost:
                return lease
            # Granted just before the broker was lost: void already; ask the new one.
            self.release(lease)

    def _acquire_once(
        self,
        count: int,
        memory: str | int | None,
        left: float | None,
        timeout: float | None,
        pin: list[str] | None,
        per_node: int = 0,
    ) -> Lease:
        rid = next(self._ids)
        req = pb.Request(
            request_id=rid, count=count, memory_bytes=_memory_bytes(memory), per_node=per_node
        )
        req.pin.extend(pin or [])
        slot = _Pending(request=req)
        with self._lock:
            self._check_open()
            self._pending[rid] = slot
            if self._up:  # else the reconnect sends it
                self._send(pb.ClientMessage(request=req))
        if not self._wait(slot, left):
            with self._lock:
                slot.abandoned = not slot.done.is_set()
                up = self._up
                if slot.abandoned and up:
                    self._send(pb.ClientMessage(cancel=pb.Cancel(request_id=rid)))
                elif slot.abandoned:
                    self._pending.pop(rid, None)
            if slot.abandoned:
                if up and self._lane is not None:
                    # The answer to the cancel (or a grant that raced it) comes on the
                    # lane, which only callers read: read it now, or a raced grant would
                    # keep the device leased to nobody's use.
                    self._wait(slot, CANCEL_ANSWER_WAIT)
                away = "" if up else f" (the broker at {self.address} is away; reconnecting)"
                raise BrokerError(f"no {count} device(s) granted within {timeout:g}s{away}")
        if slot.error:
            raise BrokerError(slot.error)
        assert slot.lease is not None
        return slot.lease

    def release(self, lease: Lease, resident: dict[str, int] | None = None) -> None:
        """Give the lease back; ``resident`` = bytes this client leaves on each device.

        Also for a void lease (``lease.valid`` False after a lost broker): the program
        has stopped using the devices, which lets their eviction go ahead.
        """
        self._check_process()
        with self._lock:
            if lease.released:
                return
            lease.released = True
            self._leases.pop(lease.lease_id, None)
            for dev in lease.device_ids:
                self._resident.pop(dev, None)
            for dev, nbytes in (resident or {}).items():
                if nbytes > 0:
                    self._resident[dev] = nbytes
            if lease.lost or self._closed or self._lost:
                # A lost session's leases were freed by the broker when it ended.
                self._lost_leases.pop(lease.lease_id, None)
                self._changed.notify_all()
                return
            rel = pb.Release(lease_id=lease.lease_id)
            for dev, nbytes in (resident or {}).items():
                rel.resident.add(device=dev, bytes=nbytes)
            if self._up:
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
            self._up = False
            self._changed.notify_all()
        self._end_session(self._session)
        self._worker.shutdown(wait=False)
        self._lose("")  # waiting acquires fail: the client is closed

    def _end_session(self, sess: _Session) -> None:
        sess.out.put(_STOP)
        if sess.lane is not None:
            sess.lane.close()
        sess.call.cancel()
        sess.channel.close()

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
        """Send on the current session (callers hold ``_lock`` and checked ``_up``).

        A failure means the broker is going away: the reader notices, reconnects and
        sends the waiting requests again; releases and eviction answers die with the
        session that they belonged to.
        """
        lane = self._lane
        if lane is None:
            self._out.put(msg)
            return
        try:
            lane.send(msg)
        except OSError:
            log.debug("the lane to %s failed; the session is ending", self.address)

    def _wait(self, slot: _Pending, timeout: float | None) -> bool:
        """Wait until ``slot`` is answered; False after ``timeout`` s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not slot.done.is_set():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            with self._lock:
                lane, gen, up = self._lane, self._gen, self._up
            if lane is None:
                # Up without a lane: the reader thread answers; but look again now and
                # then, in case the session is lost and the next one has a lane.
                poll = UP_POLL if up else DOWN_POLL
                slot.done.wait(poll if left is None else min(left, poll))
                continue
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
                msg = lane.recv(left)
            except (OSError, LaneClosed):
                self._lane_failed(lane)
            finally:
                if msg is not None:
                    self._dispatch(msg, gen)
                with self._lane_turn:
                    self._lane_reading = False
                    self._lane_turn.notify_all()
        return True

    def _lane_failed(self, lane: Lane) -> None:
        """The lane closed: the broker is gone (or ended the session); stop reading it."""
        with self._lock:
            if self._lane is lane:
                self._lane = None
        lane.close()

    def _read(self) -> None:
        """Read the session's stream; on its end reconnect, until closed or given up."""
        while True:
            with self._lock:
                call, gen = self._call, self._gen
            try:
                for msg in call:
                    self._dispatch(msg, gen)
                reason = "the broker ended the session"
            except grpc.RpcError as exc:
                code = exc.code() if hasattr(exc, "code") else None
                reason = f"lost the broker at {self.address} ({code})"
            if not self._session_lost(reason) or not self._reconnect():
                return

    def _session_lost(self, reason: str) -> bool:
        """Void the session's leases; False when the client is closed (nothing to do)."""
        with self._lock:
            if self._closed or self._lost:
                return False
            self._up = False
            for lease in self._leases.values():
                lease.lost = True
                self._lost_leases[lease.lease_id] = lease
            self._leases.clear()
            self._early_yields.clear()
            self._pending = {r: p for r, p in self._pending.items() if not p.abandoned}
            sess = self._session
        self._end_session(sess)
        with self._lane_turn:
            self._lane_turn.notify_all()
        log.warning(
            "%s; its leases are void; reconnecting for up to %gs", reason, self.reconnect_timeout
        )
        return True

    def _reconnect(self) -> bool:
        """Register again with the broker (a restarted one); False when given up."""
        deadline = time.monotonic() + self.reconnect_timeout
        delay = 0.05
        last = "no broker answers"
        while True:
            with self._lock:
                if self._closed:
                    return False
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                sess = self._open_session(min(left, 2.0), rejoin=True)
            except BrokerError as exc:
                last = str(exc)
                time.sleep(max(0.0, min(delay, deadline - time.monotonic())))
                delay = min(delay * 2, 0.5)
                continue
            with self._lock:
                if self._closed:
                    self._end_session(sess)
                    return False
                self._install(sess)
                self.reconnects += 1
                for slot in self._pending.values():  # the new broker never saw them
                    self._send(pb.ClientMessage(request=slot.request))
                self._changed.notify_all()
            log.warning(
                "registered again with the broker at %s (client %d%s)",
                self.address,
                self.client_id,
                ", which is recovering" if sess.registered.recovering else "",
            )
            return True
        self._lose(
            f"lost the broker at {self.address}, and it did not come back within "
            f"{self.reconnect_timeout:g}s ({last})"
        )
        return False

    def _lose(self, reason: str) -> None:
        """The broker is gone for good (or the client closed): fail every waiting acquire."""
        with self._lock:
            first = not (self._closed or self._lost)
            if first:
                self._lost = reason
            self._up = False
            error = self._lost or "the broker client is closed"
            pending = list(self._pending.values())
            self._pending.clear()
            self._changed.notify_all()
        for slot in pending:
            slot.error = error
            slot.done.set()
        with self._lane_turn:
            self._lane_turn.notify_all()
        if first:
            log.info("%s", reason)

    def _dispatch(self, msg: Any, gen: int) -> None:
        kind = msg.WhichOneof("kind")
        handler = {
            "granted": self._on_granted,
            "rejected": self._on_rejected,
            "yield_asked": self._on_yield_asked,
            "evict": self._on_evict,
        }.get(kind)
        if handler is not None:
            handler(msg, gen)

    def _on_granted(self, msg: Any, gen: int) -> None:
        g = msg.granted
        lease = Lease(g.lease_id, [DeviceInfo.from_pb(d) for d in g.devices])
        with self._lock:
            if gen != self._gen or not self._up:
                return  # a grant of a lost session: void (the request is sent again)
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
            self._send(pb.ClientMessage(release=pb.Release(lease_id=g.lease_id)))
        if slot is not None:
            slot.done.set()

    def _on_rejected(self, msg: Any, gen: int) -> None:
        r = msg.rejected
        with self._lock:
            if gen != self._gen:
                return
            slot = self._pending.pop(r.request_id, None)
        if slot is not None:
            if not slot.abandoned:
                slot.error = f"broker rejected the request: {r.reason}"
            slot.done.set()

    def _on_yield_asked(self, msg: Any, gen: int) -> None:
        lid = msg.yield_asked.lease_id
        with self._lock:
            if gen != self._gen:
                return
            held = self._leases.get(lid)
            if held is None and self._lane is not None:
                # The stream can overtake the lane: the grant may still be unread.
                if len(self._early_yields) > 1024:
                    self._early_yields.clear()  # leases released before the ask came
                self._early_yields.add(lid)
        if held is not None:
            held.yield_requested.set()
            if self._yield_handler is not None:
                self._submit(self._yield_handler, held)

    def _on_evict(self, msg: Any, gen: int) -> None:
        devices = list(msg.evict.devices)
        with self._lock:
            waits = any(
                set(devices) & set(lease.device_ids) for lease in self._lost_leases.values()
            )
        if waits:
            # It waits for the program to release a void lease, maybe for long: not on
            # the worker (joined at interpreter exit), on a thread of its own.
            name = "broker-evict-wait"
            threading.Thread(
                target=self._evict, args=(devices, gen), name=name, daemon=True
            ).start()
        else:
            self._submit(self._evict, devices, gen)

    def _submit(self, fn: Callable[..., None], *args: Any) -> None:
        # Closed meanwhile (the worker is shut down): the session ends anyway.
        with contextlib.suppress(RuntimeError):
            self._worker.submit(fn, *args)

    def _evict(self, devices: list[str], gen: int) -> None:
        try:
            with self._lock:
                # A device of a void lease may still be in use: wait for its release.
                while not (self._closed or self._lost) and any(
                    set(devices) & set(lease.device_ids) for lease in self._lost_leases.values()
                ):
                    self._changed.wait()
            if self._evict_handler is not None:
                self._evict_handler(devices)
        except Exception:
            log.exception("eviction handler failed")
        finally:
            # Even a failed handler must answer, or the device stays blocked.
            with self._lock:
                for dev in devices:
                    self._resident.pop(dev, None)
                if gen == self._gen and self._up:
                    with contextlib.suppress(Exception):
                        self._send(pb.ClientMessage(evict_done=pb.EvictDone(devices=devices)))
