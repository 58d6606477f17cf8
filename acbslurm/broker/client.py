"""The client library: a session with the broker, leases, and the manual API.

    from acbslurm.broker.client import BrokerClient

    with BrokerClient() as client:                  # address: ACBSLURM_BROKER_ADDRESS, ...
        with client.gpus(1, memory="20G") as devices:
            run_on(devices[0].id)                   # a GPU UUID (or cpuN)

    lease = client.acquire(2, timeout=30)           # the same, by hand
    ...
    client.release(lease)

The session is one gRPC stream (``stream.Stream``): closing the client, or the process
dying, frees every lease it holds. On the broker's host the client moves its requests
and their answers to the session's local lane (``lane_client.Lane``;
``ACBSLURM_BROKER_LANE=0`` or ``lane=False`` keeps them on the stream), which cuts a
grant's cost several times over. ``BrokerClient`` keeps the session and its leases;
either transport (``transport.Transport``) only carries the messages. Programs that
keep data on a device between leases install an eviction handler (``on_evict``) and
report what stays resident at release.

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
import functools
import itertools
import logging
import os
import secrets
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

# Imported first, though only ``stream`` uses it: a Python that lacks it is told so by
# name (agarun's bootstrap), not about protobuf's ``google`` package.
import grpc  # noqa: F401

from acbslurm.broker.address import check_address, default_address, socket_path
from acbslurm.broker.core import Device
from acbslurm.broker.lane_client import Lane, LaneClosed, lane_wanted
from acbslurm.broker.proto import device_of, pb
from acbslurm.broker.stream import Stream
from acbslurm.broker.transport import Transport, remaining
from acbslurm.config import env_float
from acbslurm.errors import BrokerError, ConfigError
from acbslurm.jobsockets import lane_path
from acbslurm.units import size_bytes
from acbslurm.values import field, mutable

log = logging.getLogger(__name__)

CANCEL_ANSWER_WAIT = 2.0  # s a timed-out acquire waits to learn whether a grant raced it
RECONNECT_TIMEOUT = 30.0  # s a client tries to get its broker back after losing it
RECONNECT_ENV = "ACBSLURM_BROKER_RECONNECT_TIMEOUT"


@mutable
class Lease:
    lease_id: int
    devices: list[Device]
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


@mutable
class _Pending:
    request: Any  # the pb.Request, sent again after a reconnect
    done: threading.Event = field(default_factory=threading.Event)
    lease: Lease | None = None
    error: str = ""
    # The caller gave up (timeout): a grant that still comes is handed straight back.
    abandoned: bool = False


@mutable
class _Session:
    """One registered session (a reconnect makes a new one)."""

    stream: Stream
    lane: Lane | None
    gen: int  # which session messages belong to (grants of a lost one are void)

    @property
    def transport(self) -> Transport:
        """What carries the requests and their answers: the lane, else the stream."""
        return self.lane if self.lane is not None else self.stream

    def close(self) -> None:
        if self.lane is not None:
            self.lane.close()
        self.stream.close()


def _release_message(lease_id: int, resident: dict[str, int]) -> Any:
    rel = pb.Release(lease_id=lease_id)
    for dev, nbytes in resident.items():
        rel.resident.add(device=dev, bytes=nbytes)
    return pb.ClientMessage(release=rel)


class BrokerClient:
    """One registered session with a broker (thread-safe).

    It owns the session's state (registration, reconnects, the waiting requests, the
    leases, residency) under one lock; the messages travel on the session's transport.
    """

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
        # Notified when a void lease is released, a request answered, and when the
        # session is lost or comes back.
        self._changed = threading.Condition(self._lock)
        self._pending: dict[int, _Pending] = {}
        self._leases: dict[int, Lease] = {}
        self._lost_leases: dict[int, Lease] = {}  # void, not yet released by the program
        self._resident: dict[str, int] = {}  # bytes reported left on each device
        # Yields asked for leases whose grant (on the lane) this client has not read yet.
        self._early_yields: set[int] = set()
        self._ids = itertools.count(1)
        self._gens = itertools.count(1)
        self._closed = False
        self._lost = ""  # set for good: the broker did not come back
        self._up = False  # a session is registered and not known to be lost
        self._gen = 0  # the current session's
        self._evict_handler: Callable[[list[str]], None] | None = None
        self._yield_handler: Callable[[Lease], None] | None = None
        self._install(self._open_session(connect_timeout, rejoin=False))
        # Handlers run here, not on the reader thread, so grants keep flowing meanwhile.
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="broker-client")
        self._reader = threading.Thread(target=self._read, name="broker-reader", daemon=True)
        self._reader.start()

    def _open_session(self, timeout: float, rejoin: bool) -> _Session:
        """Connect and register (again, with ``rejoin``); BrokerError when that fails."""
        if rejoin:
            check_address(self.address)  # the socket may have been taken meanwhile
        reg = pb.Register(name=self.name, pid=os.getpid(), session=self._session_key)
        if rejoin:
            reg.rejoin = True
            # Declare what is still held: reported residency, and all of the devices
            # of void leases the program has not released yet.
            with self._lock:
                held = dict(self._resident)
                total = {d.id: d.memory_total for d in self.devices}
                for lease in self._lost_leases.values():
                    for dev in lease.device_ids:
                        held[dev] = max(total.get(dev, 0), 1)
            for dev, nbytes in held.items():
                reg.resident.add(device=dev, bytes=nbytes)
        stream = Stream.open(self.address, reg, timeout)
        gen = next(self._gens)
        return _Session(stream, self._open_lane(stream.registered, gen), gen)

    def _open_lane(self, registered: Any, gen: int) -> Lane | None:
        # The lane sits beside the socket this client reached (the broker's own path
        # may differ, e.g. seen from a container with the directory mounted elsewhere).
        mine = socket_path(self.address)
        if not (registered.lane_path and mine and self._want_lane):
            return None
        on_message = functools.partial(self._dispatch, gen=gen)
        try:
            return Lane(lane_path(mine), registered.client_id, registered.lane_token, on_message)
        except (OSError, LaneClosed) as exc:
            log.debug("no local lane beside %s (%s); staying on gRPC", mine, exc)
            return None

    def _install(self, sess: _Session) -> None:
        """Make ``sess`` the current session (callers hold ``_lock``, or are __init__)."""
        reg = sess.stream.registered
        self._session = sess
        self.client_id: int = reg.client_id
        self.policy: str = reg.policy
        self.devices = [device_of(d) for d in reg.devices]
        self._gen = sess.gen
        self._up = True

    @property
    def on_lane(self) -> bool:
        """Whether this session's requests travel on the local lane."""
        lane = self._session.lane
        return lane is not None and not lane.closed

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
        try:
            memory_bytes = 0 if memory is None else size_bytes(memory)
        except ValueError as exc:
            raise ConfigError(f"memory hint: {exc}") from None
        req = pb.Request(count=count, memory_bytes=memory_bytes, per_node=per_node)
        req.pin.extend(pin or [])
        while True:
            lease = self._acquire_once(req, deadline, timeout)
            if not lease.lost:
                return lease
            # Granted just before the broker was lost: void already; ask the new one.
            self.release(lease)

    def _acquire_once(self, req: Any, deadline: float | None, timeout: float | None) -> Lease:
        slot = _Pending(request=pb.Request())
        slot.request.CopyFrom(req)
        slot.request.request_id = next(self._ids)
        with self._lock:
            self._check_process()
            if self._lost or self._closed:
                raise BrokerError(self._lost or "the broker client is closed")
            self._pending[slot.request.request_id] = slot
            if self._up:  # else the reconnect sends it
                self._send(pb.ClientMessage(request=slot.request))
        if not self._wait(slot, deadline):
            self._give_up(slot, timeout)
        if slot.error:
            raise BrokerError(slot.error)
        assert slot.lease is not None
        return slot.lease

    def _give_up(self, slot: _Pending, timeout: float | None) -> None:
        """Cancel a request that timed out; raise unless its answer came meanwhile."""
        rid = slot.request.request_id
        with self._lock:
            if slot.done.is_set():
                return
            slot.abandoned = True
            up, transport = self._up, self._session.transport
            if up:
                self._send(pb.ClientMessage(cancel=pb.Cancel(request_id=rid)))
            else:
                self._pending.pop(rid, None)
        if up and transport.on_lane:
            # The answer to the cancel (or a grant that raced it) comes on the lane,
            # which only callers read: read it now, or a raced grant would keep the
            # device leased to nobody's use.
            transport.wait(slot.done, time.monotonic() + CANCEL_ANSWER_WAIT)
        away = "" if up else f" (the broker at {self.address} is away; reconnecting)"
        count = slot.request.count
        raise BrokerError(f"no {count} device(s) granted within {timeout:g}s{away}")

    def release(self, lease: Lease, resident: dict[str, int] | None = None) -> None:
        """Give the lease back; ``resident`` = bytes this client leaves on each device.

        Also for a void lease (``lease.valid`` False after a lost broker): the program
        has stopped using the devices, which lets their eviction go ahead.
        """
        self._check_process()
        resident = resident or {}
        with self._lock:
            if lease.released:
                return
            lease.released = True
            self._leases.pop(lease.lease_id, None)
            for dev in lease.device_ids:
                self._resident.pop(dev, None)
            self._resident.update((dev, n) for dev, n in resident.items() if n > 0)
            if lease.lost or self._closed or self._lost:
                # A lost session's leases were freed by the broker when it ended.
                self._lost_leases.pop(lease.lease_id, None)
                self._changed.notify_all()
            elif self._up:
                self._send(_release_message(lease.lease_id, resident))

    @contextlib.contextmanager
    def gpus(
        self, count: int = 1, memory: str | int | None = None, timeout: float | None = None
    ) -> Iterator[list[Device]]:
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
        self._session.close()
        self._worker.shutdown(wait=False)
        self._lose("")  # waiting acquires fail: the client is closed

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

    def _send(self, msg: Any) -> None:
        """Send on the current session (callers hold ``_lock`` and checked ``_up``).

        A failure means the broker is going away: the reader notices, reconnects and
        sends the waiting requests again; releases and eviction answers die with the
        session that they belonged to.
        """
        self._session.transport.send(msg)

    def _wait(self, slot: _Pending, deadline: float | None) -> bool:
        """Wait until ``slot`` is answered; False once ``deadline`` has passed.

        The current session's transport brings the answer. While there is none (the
        broker is away, or the transport ended before the reader noticed the session's
        end) wait for the next session, whose transport the request is sent on again.
        """
        while not slot.done.is_set():
            left = remaining(deadline)
            if left == 0:
                return False
            with self._lock:
                transport = self._session.transport
                if not self._up or transport.closed:
                    if not slot.done.is_set():
                        self._changed.wait(left)
                    continue
            transport.wait(slot.done, deadline)
        return True

    def _finish(self, slot: _Pending) -> None:
        """``slot`` is answered (callers hold ``_lock``)."""
        slot.done.set()
        self._changed.notify_all()

    def _read(self) -> None:
        """The reader thread: read the session's stream; on its end reconnect, until
        closed or given up."""
        while True:
            with self._lock:
                sess = self._session
            reason = sess.stream.pump(functools.partial(self._dispatch, gen=sess.gen))
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
            self._changed.notify_all()
            sess = self._session
        sess.close()  # wakes the callers reading its lane
        log.warning(
            "%s; its leases are void; reconnecting for up to %gs", reason, self.reconnect_timeout
        )
        return True

    def _reconnect(self) -> bool:
        """Register again with the broker (a restarted one); False when given up."""
        deadline = time.monotonic() + self.reconnect_timeout
        delay = 0.05
        last = "no broker answers"
        while not self._closed and time.monotonic() < deadline:
            try:
                sess = self._open_session(min(deadline - time.monotonic(), 2.0), rejoin=True)
            except BrokerError as exc:
                last = str(exc)
                time.sleep(max(0.0, min(delay, deadline - time.monotonic())))
                delay = min(delay * 2, 0.5)
                continue
            return self._resume(sess)
        if self._closed:
            return False
        self._lose(
            f"lost the broker at {self.address}, and it did not come back within "
            f"{self.reconnect_timeout:g}s ({last})"
        )
        return False

    def _resume(self, sess: _Session) -> bool:
        """Go on with the new session ``sess``; False when the client closed meanwhile."""
        with self._lock:
            if self._closed:
                sess.close()
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
            ", which is recovering" if sess.stream.registered.recovering else "",
        )
        return True

    def _lose(self, reason: str) -> None:
        """The broker is gone for good (or the client closed): fail every waiting acquire."""
        with self._lock:
            first = not (self._closed or self._lost)
            if first:
                self._lost = reason
            self._up = False
            error = self._lost or "the broker client is closed"
            for slot in self._pending.values():
                slot.error = error
                slot.done.set()
            self._pending.clear()
            self._changed.notify_all()
        if first:
            log.info("%s", reason)

    def _dispatch(self, msg: Any, gen: int) -> None:
        """A message of session ``gen``, from its stream (the reader) or its lane."""
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
        lease = Lease(g.lease_id, [device_of(d) for d in g.devices])
        with self._lock:
            if gen != self._gen or not self._up:
                return  # a grant of a lost session: void (the request is sent again)
            slot = self._pending.pop(g.request_id, None)
            if slot is None or slot.abandoned:
                # Granted after the caller gave up waiting: hand it straight back.
                self._send(pb.ClientMessage(release=pb.Release(lease_id=g.lease_id)))
            else:
                self._leases[lease.lease_id] = lease
                if lease.lease_id in self._early_yields:
                    self._early_yields.discard(lease.lease_id)
                    lease.yield_requested.set()
                slot.lease = lease
            if slot is not None:
                self._finish(slot)

    def _on_rejected(self, msg: Any, gen: int) -> None:
        r = msg.rejected
        with self._lock:
            if gen != self._gen:
                return
            slot = self._pending.pop(r.request_id, None)
            if slot is None:
                return
            if not slot.abandoned:
                slot.error = f"broker rejected the request: {r.reason}"
            self._finish(slot)

    def _on_yield_asked(self, msg: Any, gen: int) -> None:
        lid = msg.yield_asked.lease_id
        with self._lock:
            if gen != self._gen:
                return
            held = self._leases.get(lid)
            if held is None and self._session.lane is not None:
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
            waits = self._in_void_lease(devices)
        if waits:
            # It waits for the program to release a void lease, maybe for long: not on
            # the worker (joined at interpreter exit), on a thread of its own.
            name = "broker-evict-wait"
            threading.Thread(
                target=self._evict, args=(devices, gen), name=name, daemon=True
            ).start()
        else:
            self._submit(self._evict, devices, gen)

    def _in_void_lease(self, devices: list[str]) -> bool:
        """Whether one of ``devices`` is in a void lease not yet released (hold ``_lock``)."""
        return any(set(devices) & set(lease.device_ids) for lease in self._lost_leases.values())

    def _submit(self, fn: Callable[..., None], *args: Any) -> None:
        # Closed meanwhile (the worker is shut down): the session ends anyway.
        with contextlib.suppress(RuntimeError):
            self._worker.submit(fn, *args)

    def _evict(self, devices: list[str], gen: int) -> None:
        try:
            with self._lock:
                # A device of a void lease may still be in use: wait for its release.
                while not (self._closed or self._lost) and self._in_void_lease(devices):
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
