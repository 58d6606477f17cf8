"""The broker daemon: the gRPC front of ``core.Broker``.

The core is touched only under one lock; each session has a reader thread (client ->
core) and its response stream (outbox -> client). When a session ends for any
reason (exit, crash, network cut) the client's leases are freed before the next
message is handled. The synchronous gRPC server is used on purpose: its per-message
cost in Python is about half that of grpc.aio (measured, see docs/broker.md).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc

from acbslurm.broker import core
from acbslurm.broker.address import parse_address, socket_path
from acbslurm.broker.proto import pb, pb_grpc
from acbslurm.errors import BrokerError

log = logging.getLogger(__name__)

TICK_SECONDS = 0.02  # how often the quantum policy looks at waiting clients
MAX_SESSIONS = 512  # each session holds one server thread


def device_msg(d: core.Device) -> Any:
    return pb.Device(
        id=d.id, name=d.name, memory_total=d.memory_total, minor=d.minor, index=d.index
    )


class BrokerService(pb_grpc.GpuBrokerServicer):  # type: ignore[misc]
    def __init__(self, broker: core.Broker, source: str = "") -> None:
        self.broker = broker
        self.source = source
        self.lock = threading.Lock()
        self.outboxes: dict[int, queue.SimpleQueue[Any]] = {}

    def _deliver(self, events: list[core.Event]) -> None:
        """Queue ``events`` to their clients (called with the lock held)."""
        for ev in events:
            box = self.outboxes.get(ev.client)
            if box is None:
                continue
            if isinstance(ev, core.Granted):
                devs = [device_msg(self.broker.devices[d]) for d in ev.devices]
                msg = pb.ServerMessage(
                    granted=pb.Granted(request_id=ev.request_id, lease_id=ev.lease_id, devices=devs)
                )
            elif isinstance(ev, core.Rejected):
                msg = pb.ServerMessage(
                    rejected=pb.Rejected(request_id=ev.request_id, reason=ev.reason)
                )
            elif isinstance(ev, core.YieldAsked):
                msg = pb.ServerMessage(yield_asked=pb.YieldAsked(lease_id=ev.lease_id))
            else:
                msg = pb.ServerMessage(evict=pb.Evict(devices=list(ev.devices)))
            box.put(msg)

    def _handle(self, cid: int, msg: Any) -> None:
        kind = msg.WhichOneof("kind")
        b = self.broker
        with self.lock:
            now = time.monotonic()
            if kind == "request":
                r = msg.request
                events = b.request(cid, r.request_id, r.count, now, r.memory_bytes, tuple(r.pin))
            elif kind == "release":
                res = {x.device: x.bytes for x in msg.release.resident}
                events = b.release(cid, msg.release.lease_id, now, res)
            elif kind == "cancel":
                events = b.cancel(cid, msg.cancel.request_id, now)
            elif kind == "evict_done":
                events = b.evict_done(cid, tuple(msg.evict_done.devices), now)
            else:
                log.warning("client %d sent an unexpected %s message", cid, kind)
                events = []
            self._deliver(events)

    def Session(self, request_iterator: Iterator[Any], context: Any) -> Iterator[Any]:
        try:
            first = next(request_iterator)
        except (StopIteration, grpc.RpcError):
            return
        if first.WhichOneof("kind") != "register":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "first message must be register")
        box: queue.SimpleQueue[Any] = queue.SimpleQueue()
        with self.lock:
            cid = self.broker.register(first.register.name, first.register.pid)
            self.outboxes[cid] = box
        log.info("client %d registered (%s, pid %d)", cid, first.register.name, first.register.pid)
        # The RPC ending (client gone, cancelled, server stopping) frees everything.
        context.add_callback(lambda: self._drop(cid))

        def read() -> None:
            with contextlib.suppress(grpc.RpcError, ValueError):
                for m in request_iterator:
                    self._handle(cid, m)
            self._drop(cid)

        threading.Thread(target=read, name=f"broker-session-{cid}", daemon=True).start()
        devices = [device_msg(d) for d in self.broker.devices.values()]
        yield pb.ServerMessage(
            registered=pb.Registered(client_id=cid, devices=devices, policy=self.broker.policy)
        )
        while True:
            out = box.get()
            if out is None:
                return
            yield out

    def _drop(self, cid: int) -> None:
        with self.lock:
            box = self.outboxes.pop(cid, None)
            if box is None:
                return
            box.put(None)
            log.info("client %d gone; freeing its leases", cid)
            self._deliver(self.broker.disconnect(cid, time.monotonic()))

    def Status(self, request: Any, context: Any) -> Any:
        with self.lock:
            return self._status()

    def _status(self) -> Any:
        b = self.broker
        now = time.monotonic()
        devices = []
        for dev_id, dev in b.devices.items():
            lease = b.holder[dev_id]
            devices.append(
                pb.DeviceState(
                    device=device_msg(dev),
                    holder=lease.client if lease else 0,
                    lease_id=lease.lease_id if lease else 0,
                    held_seconds=now - lease.since if lease else 0.0,
                    residents=[
                        pb.Resident(client_id=c, bytes=n) for c, n in b.resident[dev_id].items()
                    ],
                )
            )
        clients = []
        for info in b.clients.values():
            waits = b.waiting_for(info.client_id)
            clients.append(
                pb.ClientState(
                    client_id=info.client_id,
                    name=info.name,
                    pid=info.pid,
                    waiting_count=sum(w.count for w in waits),
                    waiting_seconds=max((now - w.since for w in waits), default=0.0),
                )
            )
        c = b.counters
        return pb.StatusReply(
            policy=b.policy,
            quantum_seconds=b.quantum,
            devices=devices,
            clients=clients,
            grants=c.grants,
            evictions=c.evictions,
            yields_asked=c.yields_asked,
            disconnects=c.disconnects,
            source=self.source,
        )

    def tick_until(self, stop: threading.Event) -> None:
        while not stop.wait(TICK_SECONDS):
            with self.lock:
                self._deliver(self.broker.tick(time.monotonic()))


class RunningBroker:
    """A started broker; ``stop()`` ends it and removes its socket."""

    def __init__(
        self, broker: core.Broker, address: str, source: str = "", socket_mode: int = 0o600
    ) -> None:
        self.address = parse_address(address)
        self.path = socket_path(self.address)
        if self.path:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            if Path(self.path).exists():
                if _socket_alive(self.path):
                    raise BrokerError(f"a broker already listens on {self.address}")
                Path(self.path).unlink()  # stale socket of a broker that died
        self.service = BrokerService(broker, source)
        self.server = grpc.server(
            ThreadPoolExecutor(max_workers=MAX_SESSIONS + 8, thread_name_prefix="broker-rpc"),
            maximum_concurrent_rpcs=MAX_SESSIONS,
            options=[
                # Notice dead peers on TCP too (unix sockets report a closed peer at once).
                ("grpc.keepalive_time_ms", 10_000),
                ("grpc.keepalive_timeout_ms", 5_000),
                ("grpc.keepalive_permit_without_calls", 1),
                ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
            ],
        )
        pb_grpc.add_GpuBrokerServicer_to_server(self.service, self.server)
        # The socket is born with the final permissions (no window where others can connect).
        old_umask = os.umask(0o777 & ~socket_mode) if self.path else None
        try:
            port = self.server.add_insecure_port(self.address)
        except RuntimeError as exc:
            raise BrokerError(f"cannot listen on {self.address}: {exc}") from None
        finally:
            if old_umask is not None:
                os.umask(old_umask)
        if not self.path and port == 0:
            raise BrokerError(f"cannot listen on {self.address}")
        self.server.start()
        if self.path:
            os.chmod(self.path, socket_mode)
        self._stop = threading.Event()
        if broker.policy == "quantum":
            threading.Thread(
                target=self.service.tick_until, args=(self._stop,), name="broker-tick", daemon=True
            ).start()
        log.info("broker listening on %s with %d device(s)", self.address, len(broker.devices))

    def stop(self, grace: float = 0.5) -> None:
        self._stop.set()
        with self.service.lock:
            for box in self.service.outboxes.values():
                box.put(None)
        self.server.stop(grace).wait()
        if self.path:
            with contextlib.suppress(FileNotFoundError):
                Path(self.path).unlink()
        log.info("broker stopped")


def _socket_alive(path: str) -> bool:
    import socket

    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(0.5)
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def serve(broker: core.Broker, address: str, source: str = "", socket_mode: int = 0o600) -> None:
    """Run the daemon in the foreground; SIGTERM and SIGINT stop it cleanly."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    running = RunningBroker(broker, address, source, socket_mode)
    while not stop.wait(3600):
        pass
    running.stop()
