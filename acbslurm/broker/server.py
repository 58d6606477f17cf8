"""The broker daemon: the gRPC front of ``core.Broker``.

The daemon runs on one asyncio event loop (``grpc.aio``): every session's reads, the
core's decisions and the pushes to other sessions happen on that one thread, so a
request costs no thread hand-offs and the core needs no lock. Each session is a
coroutine writing its outbox to the stream plus a reader task feeding the core. When
a session ends for any reason (exit, crash, network cut) the client's leases are
freed before the next message is handled. On a unix socket the daemon also serves the
sessions' local lane (``lane_server``) from the same loop.

Broker restarts: beside a unix socket the daemon keeps a small state file
(``<socket>.state``: the session keys of its clients), rewritten when a session starts
or ends and removed by a clean stop. A broker that finds one at start knows that its
predecessor died with those sessions, which may still hold device memory and compute:
it starts in recovery (``core.Broker.start_recovery``) and grants nothing until they
have rejoined or ``recovery_grace`` seconds have passed.

Why one loop: the synchronous gRPC server, with a reader thread and a writer thread per
session, cost far more server CPU per grant (docs/benchmarks.md, "The GPU broker").
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from acbslurm.broker import core
from acbslurm.broker.address import parse_address, socket_path
from acbslurm.broker.lane_server import LaneServer, token_matches
from acbslurm.broker.proto import device_msg, pb, pb_grpc
from acbslurm.errors import BrokerError
from acbslurm.jobsockets import BROKER_SOCKET, check_socket, free_socket_path, lane_path
from acbslurm.usagebook import write_broker_usage

log = logging.getLogger(__name__)

TICK_SECONDS = 0.02  # how often the quantum policy looks at waiting clients
MAX_SESSIONS = 512  # concurrent sessions (each is one open stream)
RECOVERY_GRACE = 10.0  # s a broker restarted after an unclean stop waits for old sessions

_EOF: Any = grpc.aio.EOF  # type: ignore[attr-defined]  # missing from grpc-stubs


class BrokerService(pb_grpc.GpuBrokerServicer):  # type: ignore[misc]
    """All methods run on the server's event loop (no lock needed around the core)."""

    def __init__(self, broker: core.Broker, source: str = "") -> None:
        self.broker = broker
        self.source = source
        self.outboxes: dict[int, asyncio.Queue[Any]] = {}
        self.lane: LaneServer | None = None  # set when the broker listens on a unix socket
        self.lane_tokens: dict[int, bytes] = {}
        self.state_path: str | None = None  # the state file (unix sockets only)
        self._saved_sessions: set[str] | None = None
        # A job's broker (its socket in the job's runtime folder) keeps there who held
        # the GPUs for how long, for the epilog (usagebook.BROKER_USAGE).
        self.usage_folder: str | None = None
        self._usage_said = False

    def keep_usage(self) -> None:
        """The device-seconds per client name, the leases held now counted to now."""
        if self.usage_folder is None:
            return

        try:
            write_broker_usage(self.usage_folder, self.broker.held_until(time.monotonic()))
        except OSError as exc:
            if not self._usage_said:  # once: the GPU-seconds of this job are not kept
                self._usage_said = True
                log.warning("cannot keep the GPU usage in %s: %s", self.usage_folder, exc)

    async def keep_usage_forever(self) -> None:
        """Once a second while a lease is held or one ended since the last write."""
        written: dict[str, float] = {}
        while True:
            await asyncio.sleep(1.0)
            if self.broker.held != written or any(c.leases for c in self.broker.clients.values()):
                written = dict(self.broker.held)
                self.keep_usage()

    def save_state(self) -> None:
        """Write the sessions that may hold device memory; a clean stop removes the file."""
        if self.state_path is None:
            return
        keys = self.broker.sessions()
        if keys == self._saved_sessions:
            return
        try:
            write_state(self.state_path, keys)
        except OSError as exc:
            # Keep serving; a restart after a crash would then not wait for everybody.
            log.warning("cannot write the broker state file %s: %s", self.state_path, exc)
            return
        self._saved_sessions = keys

    def open_lane(self, path: str, socket_mode: int) -> None:
        self.lane = LaneServer(
            path,
            check_token=lambda cid, token: token_matches(self.lane_tokens.get(cid), token),
            handle=self._handle,
            on_close=self._drop,
        )
        self.lane.start(socket_mode)

    def _deliver(self, events: list[core.Event]) -> None:
        """Send ``events`` to their clients: answers on the lane if open, else the stream."""
        lane = self.lane
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
            # Answers to requests take the lane when it is open; pushes stay on the stream.
            answer = isinstance(ev, core.Granted | core.Rejected)
            if answer and lane is not None and lane.is_open(ev.client):
                lane.send(ev.client, msg)
            else:
                box.put_nowait(msg)

    def _handle(self, cid: int, msg: Any) -> None:
        kind = msg.WhichOneof("kind")
        b = self.broker
        now = time.monotonic()
        if kind == "request":
            r = msg.request
            events = b.request(
                cid, r.request_id, r.count, now, r.memory_bytes, tuple(r.pin), r.per_node
            )
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

    async def _read(self, cid: int, context: Any) -> None:
        try:
            while True:
                m = await context.read()
                if m is _EOF:
                    break
                self._handle(cid, m)
        except (grpc.RpcError, asyncio.CancelledError, grpc.aio.UsageError):
            pass
        finally:
            self._drop(cid)

    # grpc.aio calls servicer methods by position: (request or iterator, context).
    async def Session(self, _requests: Any, context: Any) -> None:
        try:
            first = await context.read()
        except grpc.RpcError:
            return
        if first is _EOF:
            return
        if first.WhichOneof("kind") != "register":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "first message must be register")
        box: asyncio.Queue[Any] = asyncio.Queue()
        cid, events = self._register(first.register)
        self.outboxes[cid] = box
        # On disk before the client hears it is registered: a broker restarted after a
        # crash then waits for every session that may have touched a device.
        self.save_state()
        self._deliver(events)
        # The RPC ending (client gone, cancelled, server stopping) frees everything.
        context.add_done_callback(lambda _ctx: self._drop(cid))
        reader = asyncio.get_running_loop().create_task(self._read(cid, context))
        try:
            devices = [device_msg(d) for d in self.broker.devices.values()]
            reg = pb.Registered(
                client_id=cid,
                devices=devices,
                policy=self.broker.policy,
                recovering=self.broker.recovering,
            )
            if self.lane is not None:
                token = secrets.token_bytes(16)
                self.lane_tokens[cid] = token
                reg.lane_path = self.lane.path
                reg.lane_token = token
            await context.write(pb.ServerMessage(registered=reg))
            while True:
                out = await box.get()
                if out is None:
                    return
                await context.write(out)
        finally:
            reader.cancel()
            self._drop(cid)

    def _register(self, r: Any) -> tuple[int, list[core.Event]]:
        """A client's register message into the broker: its id, and the events of a
        rejoin (after a broker restart)."""
        events: list[core.Event] = []
        if r.rejoin:
            resident = {x.device: x.bytes for x in r.resident}
            cid, events = self.broker.rejoin(r.name, r.pid, r.session, resident, time.monotonic())
            log.info(
                "client %d rejoined after a broker restart (%s, pid %d; resident %s)",
                cid,
                r.name,
                r.pid,
                resident or "none",
            )
        else:
            cid = self.broker.register(r.name, r.pid, r.session)
            log.info("client %d registered (%s, pid %d)", cid, r.name, r.pid)
        return cid, events

    def _drop(self, cid: int) -> None:
        box = self.outboxes.pop(cid, None)
        if box is None:
            return
        box.put_nowait(None)
        self.lane_tokens.pop(cid, None)
        if self.lane is not None:
            self.lane.end(cid)
        log.info("client %d gone; freeing its leases", cid)
        self._deliver(self.broker.disconnect(cid, time.monotonic()))
        self.save_state()

    def end_recovery(self) -> None:
        if self.broker.recovering:
            log.warning("recovery grace over; granting resumes")
        self._deliver(self.broker.end_recovery(time.monotonic()))
        self.save_state()

    async def Status(self, _request: Any, _context: Any) -> Any:
        return self._status()

    def _status(self) -> Any:
        b = self.broker
        now = time.monotonic()
        c = b.counters
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
                    on_lane=self.lane is not None and self.lane.is_open(info.client_id),
                    rejoined=info.rejoined,
                )
            )
        return pb.StatusReply(
            policy=b.policy,
            quantum_seconds=b.quantum,
            devices=self._device_states(now),
            clients=clients,
            grants=c.grants,
            evictions=c.evictions,
            yields_asked=c.yields_asked,
            disconnects=c.disconnects,
            backfill=b.backfill,
            backfills=c.backfills,
            source=self.source,
            recovering=b.recovering,
            recovery_seconds_left=max(0.0, b.recovery_until - now) if b.recovering else 0.0,
            sessions_expected=len(b.expected or ()) if b.recovering else 0,
        )

    def _device_states(self, now: float) -> list[Any]:
        b = self.broker
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
        return devices

    async def tick_forever(self) -> None:
        while True:
            await asyncio.sleep(TICK_SECONDS)
            self._deliver(self.broker.tick(time.monotonic()))
            if not self.broker.recovering:
                self.save_state()  # the grace ended in this tick


def state_path_for(sock: str) -> str:
    return sock + ".state"


def write_state(path: str, sessions: set[str]) -> None:
    """Atomically replace the state file (mode 0600)."""
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"pid": os.getpid(), "sessions": sorted(sessions)}, f)
    os.replace(tmp, path)


def read_state(path: str) -> set[str] | None:
    """The sessions a broker that died left in its state file; None if unreadable."""
    try:
        with open(path) as f:
            data = json.load(f)
        sessions = data["sessions"]
        if not isinstance(sessions, list):
            return None
        return {str(x) for x in sessions}
    except (OSError, ValueError, KeyError, TypeError):
        return None


class RunningBroker:
    """A started broker (on the running event loop); ``stop()`` ends it, removes its socket."""

    def __init__(
        self,
        broker: core.Broker,
        address: str,
        source: str = "",
        recovery_grace: float = RECOVERY_GRACE,
    ) -> None:
        self.broker = broker
        self.recovery_grace = recovery_grace
        self._recovery_timer: asyncio.TimerHandle | None = None
        self.address = parse_address(address)
        self.path = socket_path(self.address)
        self.source = source
        self.service = BrokerService(broker, source)
        self._tick: asyncio.Task[None] | None = None
        self._usage: asyncio.Task[None] | None = None
        self.server: Any = None

    async def start(self, socket_mode: int = 0o600) -> None:
        if self.path:
            _clear_stale_socket(self.path, self.address)
            self._recover(state_path_for(self.path))
        self.server = grpc.aio.server(
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
        self._listen(socket_mode)
        try:
            await self.server.start()
            if self.path:
                os.chmod(self.path, socket_mode)
                self._open_lane(socket_mode)
        except BaseException:
            # Nothing will answer there: leave no socket file that says a broker does.
            await self.server.stop(0)
            if self.path:
                with contextlib.suppress(FileNotFoundError):
                    Path(self.path).unlink()
            state = self.service.state_path
            if state and not self.broker.recovering:  # sessions to wait for stay recorded
                with contextlib.suppress(FileNotFoundError):
                    Path(state).unlink()
            raise
        if self.broker.policy == "quantum":
            self._tick = asyncio.get_running_loop().create_task(self.service.tick_forever())
        self._keep_usage()
        if self.broker.recovering:
            # Ends when the status says it does (recovery_until was set as the state was
            # read, before the server started), not a whole grace after the start.
            left = max(0.0, self.broker.recovery_until - time.monotonic())
            self._recovery_timer = asyncio.get_running_loop().call_later(
                left, self.service.end_recovery
            )
        log.info("broker listening on %s with %d device(s)", self.address, len(self.broker.devices))

    def _keep_usage(self) -> None:
        """A job's broker (on the job's ``broker.sock``) keeps its usage beside it."""
        if self.path and os.path.basename(self.path) == BROKER_SOCKET:
            self.service.usage_folder = os.path.dirname(self.path)
            loop = asyncio.get_running_loop()
            self._usage = loop.create_task(self.service.keep_usage_forever())

    def _recover(self, state: str) -> None:
        """A state file left behind: the previous broker died; wait for its sessions."""
        self.service.state_path = state
        if not os.path.lexists(state):
            try:
                write_state(state, set())
            except OSError as exc:
                raise BrokerError(f"cannot write the broker state file {state}: {exc}") from None
            self.service.save_state()
            return
        expected = read_state(state)
        self.broker.start_recovery(expected, time.monotonic() + self.recovery_grace)
        if self.broker.recovering:
            who = "an unknown number of" if expected is None else str(len(expected))
            log.warning(
                "the previous broker on %s did not stop cleanly: waiting up to %gs for its "
                "%s session(s) to come back before granting",
                self.address,
                self.recovery_grace,
                who,
            )
        self.service.save_state()

    def _listen(self, socket_mode: int) -> None:
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

    def _open_lane(self, socket_mode: int) -> None:
        lane = lane_path(self.path or "")
        try:
            self.service.open_lane(lane, socket_mode)
        except OSError as exc:
            raise BrokerError(f"cannot listen on {lane}: {exc.strerror or exc}") from None

    async def stop(self, grace: float = 0.5) -> None:
        if self._tick is not None:
            self._tick.cancel()
        if self._usage is not None:
            self._usage.cancel()
            self.service.keep_usage()  # the leases still held, counted to the stop
        if self._recovery_timer is not None:
            self._recovery_timer.cancel()
        for box in self.service.outboxes.values():
            box.put_nowait(None)
        if self.service.lane is not None:
            self.service.lane.close()
        await self.server.stop(grace)
        if self.path:
            with contextlib.suppress(FileNotFoundError):
                Path(self.path).unlink()
        state = self.service.state_path
        if state:
            self.service.state_path = None  # no more writes after this
            with contextlib.suppress(FileNotFoundError):
                Path(state).unlink()  # a clean stop: the next broker need not wait
        log.info("broker stopped")


def _clear_stale_socket(path: str, address: str) -> None:
    """Make room for the socket: refuse a live broker, remove a dead one's socket."""
    parent = Path(path).parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BrokerError(
            f"cannot create {parent} for the broker socket: {exc.strerror} (inside a job, "
            "the acbslurm prolog makes the job's runtime directory; or pass --listen)"
        ) from None
    check_socket(path)  # a directory others may write, or someone else's socket there
    if not free_socket_path(path):  # else a stale socket of a broker that died is gone
        raise BrokerError(f"a broker already listens on {address}")


async def _serve(
    broker: core.Broker,
    address: str,
    source: str,
    socket_mode: int,
    on_ready: Callable[[], None] | None,
    recovery_grace: float,
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    running = RunningBroker(broker, address, source, recovery_grace)
    await running.start(socket_mode)
    if on_ready is not None:
        on_ready()
    await stop.wait()
    await running.stop()


def serve(
    broker: core.Broker,
    address: str,
    source: str = "",
    socket_mode: int = 0o600,
    on_ready: Callable[[], None] | None = None,
    recovery_grace: float = RECOVERY_GRACE,
) -> None:
    """Run the daemon in the foreground; SIGTERM and SIGINT stop it cleanly.

    ``on_ready`` runs once the sockets accept connections. ``recovery_grace``: seconds
    to wait for the sessions of a predecessor that did not stop cleanly.
    """
    asyncio.run(_serve(broker, address, source, socket_mode, on_ready, recovery_grace))
