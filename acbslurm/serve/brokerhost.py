"""The pool's own broker (bare node): the broker daemon on a thread of the serve process.

``RecordingBroker`` is the broker's core plus a record of the latest leases (client
name, devices, granted and ended, on the monotonic clock; the last ``RECORD_LIMIT``, so
a pool that serves for weeks does not grow) and its invariant check after every
decision; the acceptance test reads the record to prove that no device was ever held
by two models at once.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import os
import tempfile
import threading
import time
from typing import Any

from acbslurm.broker import core
from acbslurm.broker.server import RunningBroker
from acbslurm.errors import BrokerError
from acbslurm.values import mutable

RECORD_LIMIT = 50_000  # leases kept (~10 MB); older ones are dropped, oldest first
VIOLATION_LIMIT = 100  # the first ones say what went wrong; more add nothing


@mutable
class LeaseRecord:
    lease_id: int
    client: str
    devices: tuple[str, ...]
    granted: float
    ended: float = 0.0  # 0 = still held


class RecordingBroker(core.Broker):
    """The core, recording leases and checking its invariants after each step."""

    def __init__(
        self,
        devices: list[core.Device],
        policy: str = "fifo",
        quantum: float = 1.0,
        keep: int = RECORD_LIMIT,
        backfill: bool = False,
    ) -> None:
        super().__init__(devices, policy, quantum, backfill)
        self.record: collections.deque[LeaseRecord] = collections.deque(maxlen=keep)
        self._open: dict[int, LeaseRecord] = {}
        self.violations: list[str] = []

    def _note(self, events: list[core.Event], now: float) -> list[core.Event]:
        self._close_ended(now)
        for ev in events:  # the leases granted: their records begin
            if isinstance(ev, core.Granted):
                info = self.clients.get(ev.client)
                name = info.name if info else str(ev.client)
                rec = LeaseRecord(ev.lease_id, name, ev.devices, now)
                self.record.append(rec)
                self._open[ev.lease_id] = rec
        try:
            self.check_invariants()
        except AssertionError as exc:
            if len(self.violations) < VIOLATION_LIMIT:
                self.violations.append(str(exc))
        return events

    def _close_ended(self, now: float) -> None:
        """The records of leases no client holds any more end ``now``."""
        held = {lease.lease_id for info in self.clients.values() for lease in info.leases.values()}
        for lid in [lid for lid in self._open if lid not in held]:
            self._open.pop(lid).ended = now

    def disconnect(self, client: int, now: float) -> list[core.Event]:
        return self._note(super().disconnect(client, now), now)

    def request(
        self,
        client: int,
        request_id: int,
        count: int,
        now: float,
        memory: int = 0,
        pin: tuple[str, ...] = (),
        per_node: int = 0,
    ) -> list[core.Event]:
        events = super().request(client, request_id, count, now, memory, pin, per_node)
        return self._note(events, now)

    def cancel(self, client: int, request_id: int, now: float) -> list[core.Event]:
        return self._note(super().cancel(client, request_id, now), now)

    def release(
        self, client: int, lease_id: int, now: float, resident: dict[str, int] | None = None
    ) -> list[core.Event]:
        return self._note(super().release(client, lease_id, now, resident), now)

    def evict_done(self, client: int, devices: tuple[str, ...], now: float) -> list[core.Event]:
        return self._note(super().evict_done(client, devices, now), now)


def overlaps(record: list[LeaseRecord]) -> list[str]:
    """Pairs of leases of different clients that held one device at the same time."""
    out = []
    now = time.monotonic()
    by_dev: dict[str, list[LeaseRecord]] = {}
    for r in record:
        for d in r.devices:
            by_dev.setdefault(d, []).append(r)
    for dev, recs in by_dev.items():
        recs.sort(key=lambda r: r.granted)
        for a, b in itertools.pairwise(recs):
            end = a.ended or now
            if b.granted < end and a.client != b.client:
                out.append(f"{dev}: lease {a.lease_id} ({a.client}) and {b.lease_id} ({b.client})")
    return out


def summary(snap: dict[str, Any], node_of: dict[str, str]) -> list[str]:
    """What the pool's broker lent, for the pool's log when it stops: leases, overlaps
    and invariant violations (both 0 unless the broker is wrong), and per client the
    gang sizes it held and on which nodes."""
    record: list[LeaseRecord] = snap["record"]
    out = [
        f"pool broker: {len(record)} lease(s), {len(overlaps(record))} overlap(s), "
        f"{len(snap['violations'])} invariant violation(s)"
    ]
    by_client: dict[str, list[LeaseRecord]] = {}
    for r in record:
        by_client.setdefault(r.client, []).append(r)
    for client, recs in sorted(by_client.items()):
        sizes = ",".join(str(n) for n in sorted({len(r.devices) for r in recs}))
        nodes = sorted({node_of.get(d, "") or "-" for r in recs for d in r.devices})
        per = max(len({node_of.get(d, "") for d in r.devices}) for r in recs)
        out.append(
            f"pool broker: {client}: {len(recs)} lease(s) of {sizes} device(s), "
            f"on node(s) {','.join(nodes)}, at most {per} node(s) per lease"
        )
    return out


class BrokerThread:
    """A broker on its own event loop thread, listening on a private unix socket."""

    def __init__(
        self,
        devices: list[core.Device],
        policy: str,
        quantum: float,
        source: str,
        address: str | None = None,
        backfill: bool = False,
    ) -> None:
        self.dir = "" if address else tempfile.mkdtemp(prefix="acbslurm-serve-")
        self.address = address or f"unix:{os.path.join(self.dir, 'broker.sock')}"
        self.broker = RecordingBroker(devices, policy, quantum, backfill=backfill)
        self.source = source
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="serve-broker", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise BrokerError(f"the pool's broker did not start: {self._error}")

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._main())
        finally:
            self.loop.close()  # its selector's descriptors with it

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        running = RunningBroker(self.broker, self.address, self.source)
        try:
            await running.start(0o600)
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        await self._stop.wait()
        await running.stop()

    def call(self, fn: Any) -> Any:
        """Run ``fn()`` on the broker's loop (the core is not thread-safe) and return its value."""
        return asyncio.run_coroutine_threadsafe(_call(fn), self.loop).result(10)

    def snapshot(self) -> dict[str, Any]:
        def take() -> dict[str, Any]:
            b = self.broker
            return {
                "record": list(b.record),
                "violations": list(b.violations),
                "grants": b.counters.grants,
                "evictions": b.counters.evictions,
                "yields_asked": b.counters.yields_asked,
                "disconnects": b.counters.disconnects,
                "backfills": b.counters.backfills,
                "clients": {c.client_id: c.name for c in b.clients.values()},
            }

        return dict(self.call(take))

    def stop(self) -> None:
        if self._stop is not None and self._thread.is_alive():
            self.loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(10)
        elif self._thread.ident is None:
            self.loop.close()  # never started
        if not self.dir:
            return
        for name in os.listdir(self.dir) if os.path.isdir(self.dir) else []:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self.dir, name))
        with contextlib.suppress(OSError):
            os.rmdir(self.dir)


async def _call(fn: Any) -> Any:
    return fn()
