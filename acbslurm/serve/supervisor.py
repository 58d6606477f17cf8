"""The gateway's side of the workers: start, connect, route messages, restart.

Each model has one ``WorkerHandle``. Requests get an id and an asyncio queue that
receives the worker's messages for them. When a worker dies (killed, crashed, its
broker gone) every request it had fails at once with a 503 and the handle starts a
new worker (backing off up to 10 s); a worker that refuses to run at its first start
(its gang cannot fit, its weights cannot load, its vLLM server cannot start) is not
restarted and its model answers 503 with the reason. Once the model has been ready,
a refusal is a fault like any other (a vLLM server that died before it was ready:
killed, out of memory, a broken start) and the worker is restarted with the same
backoff: a model that ran once comes back after every fault.

Whatever ends a worker, what its vLLM server left is then removed: every process of
the server's session and below it, its shared memory files and its folder (the
worker says which, ``server`` message); a worker SIGKILLed leaves them otherwise
(serve/procs.py: an engine process outlives its API server).

A model with ``procs: N`` runs as a worker group: the handle starts the leader (rank
0, the process it talks to), and when the leader has opened its rendezvous, the
N-1 followers (here, or on the job's other nodes: ``placement``). The group lives
and dies as one: when any of its processes exits, the others are stopped, the
model's requests fail with 503 and the whole group is started again.

A heartbeat bounds each turn (gunicorn's arbiter does the same for its workers): a
worker says ``busy`` when its turn starts computing and ``busy: false`` when it ends,
and every message from it meanwhile (a token, a streamed chunk, a whole answer, a
``progress`` note) is progress. A worker busy with no progress for ``hang_timeout``
seconds is hung (its server stopped, a wedged kernel, a decoding loop that never
returns): its requests fail with 504 (code ``model_hung``), its vLLM server's processes
and the worker are killed (its broker session ends, so its lease goes back and the
other models run), the server's shared memory files are removed, and the worker is
restarted; ``/health`` and ``/metrics`` (``acbslurm_serve_hangs``) say so.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import shutil
import signal
import stat
import sys
import tempfile
import time
from collections import deque
from typing import Any

from acbslurm import procfs
from acbslurm.serve import procs
from acbslurm.serve.engines import engine_kind
from acbslurm.serve.errors import ProtocolError
from acbslurm.serve.keys import NO_KEY
from acbslurm.serve.placement import Placement, from_env
from acbslurm.serve.pool import HANG_TIMEOUT, ModelSpec
from acbslurm.serve.protocol import (
    MAX_LINE,
    Busy,
    Error,
    ForRequest,
    Generate,
    Progress,
    Server,
    ToGateway,
    decode_to_gateway,
    encode,
)
from acbslurm.usagebook import Book
from acbslurm.values import field, mutable

log = logging.getLogger(__name__)

EXIT_REFUSED = 3
# s a worker may outlive its vLLM server: one exits on its own within 15 s of its
# server's death (engines/vllm/worker.py's DEATH_CLEANUP_S); past this, the gateway kills it.
SERVER_GONE_GRACE = 20.0
STATS_COUNTERS = (
    "gpu_wait_seconds",
    "turns",
    "swaps_in",
    "swaps_out",
    "swap_in_seconds",
    "swap_out_seconds",
)


class Unavailable(Exception):
    """The model cannot take requests now (starting, restarting, refused)."""

    def __init__(self, message: str, retry_after: int = 2) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Overloaded(Unavailable):
    """Too many requests wait for this model."""


@mutable
class Pending:
    queue: asyncio.Queue[ForRequest] = field(default_factory=asyncio.Queue)
    key: str = NO_KEY  # the NAME of the request's key: who it is billed to (serve/keys.py)
    rid: str = ""
    submitted: float = 0.0  # monotonic: when it was queued for the worker
    # The worker has sent text of it (or its end): it is computed, no longer queued. A
    # non-streamed request on vLLM has nothing to send before its end: queued till then.
    started: bool = False
    queued: float = 0.0  # seconds from submitted to the worker's first answer of it


class WorkerHandle:
    def __init__(
        self,
        spec: ModelSpec,
        broker: str,
        device: str,
        max_queue: int,
        env: dict[str, str] | None = None,
        start_timeout: float = 300.0,
        placement: Placement | None = None,
        hang_timeout: float = HANG_TIMEOUT,
        queue_share: int = 0,
    ) -> None:
        self.spec = spec
        self.hang_timeout = hang_timeout
        # How many of ``max_queue`` one key's requests may take (0: no share; PoolSpec).
        self.queue_share = queue_share
        self.broker = broker
        self.device = device
        self.max_queue = max_queue
        self.env = env or {}
        self.start_timeout = start_timeout
        self.placement = placement if placement is not None else from_env()
        self.followers: list[asyncio.subprocess.Process] = []
        self._watchers: set[asyncio.Task[None]] = set()
        self.state = "stopped"  # starting | ready | restarting | refused | stopped
        self.reason = ""
        self.proc: asyncio.subprocess.Process | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.pending: dict[str, Pending] = {}
        # Pieces of text its workers sent ("delta"), over all lives: a request is being
        # decoded once this grows (tests kill a worker mid-decoding on that state).
        self.deltas = 0
        self.stats: dict[str, float] = {}  # its last ``stats`` message's numbers
        self.base: dict[str, float] = dict.fromkeys(STATS_COUNTERS, 0.0)  # earlier lives
        self.restarts = 0
        self.ever_ready = False  # a refusal after this is a fault: restarted
        self.ready_event = asyncio.Event()
        self._ids = itertools.count(1)
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        self.weights_bytes = 0
        self.max_context = 0
        self.max_prompt_chars = 0  # 0: unknown (no worker ready yet)
        self.routes: list[str] | None = None  # the paths it serves; None: not ready yet
        # (devices, granted, released) of this model's recent leases, as its worker saw them.
        self.lease_log: deque[tuple[tuple[str, ...], float, float]] = deque(maxlen=10_000)
        # The heartbeat: whether the worker's turn computes, when it last sent anything,
        # its vLLM server's pid (its session's id; 0: none), the hangs declared.
        self.busy = False
        self.progress = 0.0
        self.server_pid = 0
        self.server_shm: set[str] = set()  # its shared memory files, as its worker saw them
        self.server_folder = ""  # its $TMPDIR/acbslurm-vllm-* folder (socket, log)
        self.server_started = 0  # its start time (procs.start_time): the pid is the same one
        self.hangs = 0
        # Who used the model's leases (usagebook): the gateway's book, one per pool, and
        # the lease the worker computes in now (devices, granted), from its busy message.
        self.book = Book()
        self._lease_open: tuple[int, float] | None = None

    # -- life ---------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._supervise())

    async def _supervise(self) -> None:
        backoff = 0.5
        while not self._stopping:
            started = time.monotonic()
            self.state = "starting"
            folder = tempfile.mkdtemp(prefix="acbslurm-w-")
            try:
                code = await self._run_in(os.path.join(folder, "w.sock"))
            finally:
                # Every way out: the worker exiting, the gateway stopping (this task is
                # cancelled), an error starting it.
                shutil.rmtree(folder, ignore_errors=True)
                for k in STATS_COUNTERS:  # this life's counters join the earlier lives'
                    self.base[k] += self.stats.get(k, 0.0)
                self.stats = {}
            if self._stopping:
                break
            if code == EXIT_REFUSED and not self.ever_ready:
                self.state = "refused"
                log.error("model %s: %s", self.spec.name, self.reason)
                self.ready_event.set()
                return
            self.restarts += 1
            self.state = "restarting"
            if not self.reason:
                self.reason = f"the worker exited ({code}); restarting"
            log.warning("model %s: worker exited (%s); restarting", self.spec.name, code)
            if time.monotonic() - started > 30:
                backoff = 0.5
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 10.0)

    async def _run_in(self, sock: str) -> int | None:
        env = {**os.environ, **self.env}
        group = ["--rendezvous-host", self.placement.host] if self.spec.procs > 1 else []
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            worker_module(self.spec.engine),
            "--spec",
            json.dumps(self.spec.as_dict()),
            "--socket",
            sock,
            "--broker",
            self.broker,
            "--device",
            self.device,
            *group,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
        )
        proc = self.proc
        reader = None
        deadline = time.monotonic() + self.start_timeout
        while reader is None and time.monotonic() < deadline and proc.returncode is None:
            try:
                reader, self.writer = await asyncio.open_unix_connection(sock, limit=MAX_LINE)
            except OSError:
                await asyncio.sleep(0.05)
        if reader is None:
            self.reason = f"worker for {self.spec.name} did not open its socket"
            _signal(proc, signal.SIGKILL)
            return await proc.wait()
        self.busy, self.server_pid, self.server_shm, self.server_folder = False, 0, set(), ""
        watchdog = asyncio.get_running_loop().create_task(self._watchdog(proc))
        try:
            await self._read(reader)
        finally:
            watchdog.cancel()
            self.busy = False
            if not self._stopping:
                self.state = "restarting"
            self._lease_lost()
            self._fail_all(503, f"the worker of model {self.spec.name} stopped; retry")
            self._drop_writer()
            self.ready_event.clear()
        if self._stopping:
            # stop() has sent SIGTERM: a worker with a server of its own (engine: vllm)
            # stops it and removes its folder first; stop() kills it after 5 s.
            await _wait_or_kill(proc, 5)
        else:
            _signal(proc, signal.SIGKILL)
        code = await proc.wait()
        await self._reap_server()
        await self._stop_followers()
        return self._exit_code if self._exit_code is not None else code

    async def _reap_server(self) -> None:
        """The worker is gone: what its vLLM server left goes too (its session's
        processes and those below them, its shared memory files, its folder). A
        worker that stopped its server leaves nothing, and this finds nothing."""
        sid, shm, folder = self.server_pid, set(self.server_shm), self.server_folder
        # Its leader still there, or gone (the session may live on without it); never
        # a group or the processes below a pid another process took over since.
        if sid:
            shm |= await asyncio.to_thread(procs.kill_session, sid, 10.0, self.server_started)
            procs.remove_shm(shm)
        # Only a vLLM server's folder of this user (acbslurm-vllm-*, a real folder, not a
        # link): what the gateway may remove for its worker.
        if not os.path.isabs(folder) or not os.path.basename(folder).startswith("acbslurm-vllm-"):
            return
        try:
            st = os.lstat(folder)
        except OSError:
            return
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid():
            await asyncio.to_thread(shutil.rmtree, folder, True)

    _exit_code: int | None = None

    async def _read(self, reader: asyncio.StreamReader) -> None:
        self._exit_code = None
        while True:
            try:
                line = await reader.readline()
            except (OSError, ValueError):
                return
            if not line:
                return
            try:
                msg = decode_to_gateway(line)
            except ProtocolError as exc:
                log.warning("model %s: a line from its worker skipped: %s", self.spec.name, exc)
                continue
            await self._handle(msg)

    async def _watchdog(self, proc: asyncio.subprocess.Process) -> None:
        """Declare the worker hung once its turn has made no progress for
        ``hang_timeout`` seconds (``_hung``); kill one that outlives its vLLM server by
        ``SERVER_GONE_GRACE`` seconds (``_orphaned``), busy or not: an idle worker
        whose server died sends nothing, and its model's requests would reach a dead
        server until it exits."""
        step = min(1.0, self.hang_timeout / 4)
        server_gone: float | None = None
        while True:
            await asyncio.sleep(step)
            now = time.monotonic()
            quiet = now - self.progress
            if self.busy and quiet > self.hang_timeout and proc.returncode is None:
                await self._hung(proc, quiet)
                return
            if self.server_pid and not procfs.running(self.server_pid):
                server_gone = server_gone or now
                if now - server_gone > SERVER_GONE_GRACE and proc.returncode is None:
                    await self._orphaned(proc, now - server_gone)
                    return

    async def _orphaned(self, proc: asyncio.subprocess.Process, since: float) -> None:
        """The worker's vLLM server ended ``since`` seconds ago and the worker did not
        exit: what is left of the server's session and the worker are killed, the
        server's shared memory files removed; the supervisor then restarts the worker
        (its requests get 503 as the connection closes)."""
        name, pid = self.spec.name, self.server_pid
        self.reason = (
            f"model {name}: its vLLM server (pid {pid}) ended {since:.0f} s ago and its "
            "worker did not exit; killed, restarting"
        )
        log.error(
            "model %s: worker pid %d outlived its vLLM server (pid %d) by %.0f s; "
            "killing it and restarting",
            name,
            proc.pid,
            pid,
            since,
        )
        self.state = "restarting"
        await self._kill_server_and_worker(proc, patience=0)

    async def _hung(self, proc: asyncio.subprocess.Process, quiet: float) -> None:
        """Fail the model's requests (504), kill its server's session and its worker (the
        broker sees the worker's session end and takes the lease back), remove the
        server's shared memory files; the supervisor then restarts the worker."""
        name = self.spec.name
        server = f", vLLM server pid {self.server_pid}" if self.server_pid else ""
        self.reason = (
            f"model {name} hung: no progress for {quiet:.1f} s (hang_timeout "
            f"{self.hang_timeout:g} s) on {len(self.pending)} request(s) in flight; "
            "killed, restarting"
        )
        log.error(
            "model %s: hung: worker pid %d%s made no progress for %.1f s on %d request(s); "
            "killing it and restarting",
            name,
            proc.pid,
            server,
            quiet,
            len(self.pending),
        )
        self.hangs += 1
        self.state = "restarting"
        self.busy = False
        self._fail_all(504, self.reason, code="model_hung")
        # The worker sees its server die, removes the server's folder and exits; one
        # that does not (itself hung) is killed.
        await self._kill_server_and_worker(proc, patience=5)

    async def _kill_server_and_worker(
        self, proc: asyncio.subprocess.Process, patience: float
    ) -> None:
        """SIGKILL to the vLLM server's session (first: the server is the worker's
        child, so its pid is still its own), up to ``patience`` seconds for the worker
        to exit, SIGKILL to the worker; then the server's shared memory files are
        removed: those its processes held, and those its worker reported (its
        processes may all be gone, with nothing left to read them from)."""
        sid = self.server_pid
        shm: set[str] = set()
        if sid:
            killed = await asyncio.to_thread(procs.kill_session, sid, 10.0, self.server_started)
            shm = killed | self.server_shm
            if patience:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(proc.wait(), patience)
        _signal(proc, signal.SIGKILL)
        procs.remove_shm(shm)

    # complexity: a dispatcher, one case per message type (serve/protocol.py), each a few
    # lines; a table of handlers would lose mypy's narrowing of each message.
    async def _handle(self, msg: ToGateway) -> None:
        """One message from the worker: about the heartbeat (``_beat``), about a request
        (to its waiter), or about the worker's life."""
        self.progress = time.monotonic()  # any message is progress (the heartbeat)
        match msg["type"]:
            case "busy" | "progress" | "server":
                self._beat(msg)
            case "accepted" | "error" | "delta" | "event" | "body" | "done":
                self._to_request(msg)
            case "ready":
                self.routes = msg["routes"]
                self.weights_bytes = msg["weights_bytes"]
                self.max_context = msg["max_context"]
                self.max_prompt_chars = msg["max_prompt_chars"]
                self.state = "ready"
                self.ever_ready = True
                self.reason = ""
                self.ready_event.set()
            case "fatal":
                self.reason = msg["message"]
                self._exit_code = msg["exit"]
            case "stats":
                self.stats = {k: v for k, v in msg.items() if isinstance(v, int | float)}
            case "lease":
                devices, granted, released = msg["devices"], msg["granted"], msg["released"]
                self.lease_log.append((tuple(devices), granted, released))
                self._lease_open = None
                self.book.lease(self.spec.name, len(devices), granted, released)
            case "rendezvous":
                await self._start_followers(msg["address"])
            case "group_failed":
                self.reason = f"worker group failed: {msg['message']}"

    def _beat(self, msg: Busy | Progress | Server) -> None:
        """The heartbeat's own messages: a turn computing or not (with its lease), the
        worker's vLLM server (what to kill and remove when the worker ends)."""
        match msg["type"]:
            case "busy":
                self.busy = msg["busy"]
                if self.busy and "granted" in msg:
                    devices = msg.get("devices", [])
                    self._lease_open = (len(devices), msg["granted"])
                    self.book.open_lease(self.spec.name, devices, msg["granted"])
            case "server":
                self.server_pid = msg["pid"]
                self.server_shm = set(msg["shm"])
                self.server_folder = msg["folder"]
                self.server_started = procs.start_time(self.server_pid) if self.server_pid else 0

    def _to_request(self, msg: ForRequest) -> None:
        """A message about one request (accepted, text, its end, its error) to its waiter."""
        kind = msg["type"]
        if kind == "delta":
            self.deltas += 1
        p = self.pending.get(msg.get("id", ""))
        if p is None:
            return
        # "accepted" comes on arrival, computed or queued in the worker alike.
        if not p.started and kind != "accepted":
            p.started = True
            p.queued = time.monotonic() - p.submitted
        if msg["type"] == "done":
            self.book.tokens(p.rid, msg["prompt_tokens"], msg["completion_tokens"], p.queued)
        p.queue.put_nowait(msg)

    def _lease_lost(self) -> None:
        """The worker is gone in the middle of a turn: its lease ended with it (the broker
        takes it back when the worker's session ends), and is counted to now."""
        if self._lease_open is not None:
            devices, granted = self._lease_open
            self._lease_open = None
            self.book.lease(self.spec.name, devices, granted, time.monotonic())

    # -- the followers of a worker group -------------------------------------------------

    async def _start_followers(self, rendezvous: str) -> None:
        leader = self.proc
        env = {**os.environ, **self.env}
        spec = json.dumps(self.spec.as_dict())
        for rank in range(1, self.spec.procs):
            argv = self.placement.follower_argv(
                rank, spec, rendezvous, self.device, engine=self.spec.engine
            )
            try:
                proc = await asyncio.create_subprocess_exec(
                    *argv, env=env, stdin=asyncio.subprocess.DEVNULL
                )
            except OSError as exc:  # srun missing, say: the group cannot form, ever
                self.reason = f"cannot start follower {rank} ({argv[0]}): {exc}"
                self._exit_code = EXIT_REFUSED
                log.error("model %s: %s", self.spec.name, self.reason)
                if leader is not None:
                    _signal(leader, signal.SIGKILL)
                return
            self.followers.append(proc)
            task = asyncio.get_running_loop().create_task(self._watch_follower(rank, proc, leader))
            self._watchers.add(task)  # the loop keeps only a weak reference
            task.add_done_callback(self._watchers.discard)

    async def _watch_follower(
        self, rank: int, proc: asyncio.subprocess.Process, leader: Any
    ) -> None:
        """A follower that exits takes its group down: the leader is killed (its lease
        ends with its broker session), which fails the requests and restarts the group."""
        code = await proc.wait()
        if self._stopping or leader is None or leader.returncode is not None:
            return
        if proc not in self.followers:
            return  # stopped by us
        log.warning("model %s: follower %d exited (%s)", self.spec.name, rank, code)
        self.reason = f"follower {rank} of the worker group exited ({code})"
        _signal(leader, signal.SIGKILL)

    async def _stop_followers(self) -> None:
        """SIGTERM (srun passes it to the remote task), SIGKILL after 5 s."""
        followers, self.followers = self.followers, []
        for proc in followers:
            _signal(proc, signal.SIGTERM)
            _signal(proc, signal.SIGCONT)  # a stopped one gets SIGTERM only so
        for proc in followers:
            await _wait_or_kill(proc, 5)

    def _drop_writer(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    def _fail_all(self, status: int, message: str, code: str = "worker_restarted") -> None:
        now = time.monotonic()
        for rid, p in self.pending.items():
            p.queue.put_nowait(
                {"type": "error", "status": status, "message": message, "code": code}
            )
            self.book.closed(rid, now)
        self.pending.clear()

    def fail_queued(self, message: str, code: str, retry_after: int) -> int:
        """503 (with Retry-After) to the requests the worker has not begun, each cancelled
        in the worker; those it computes go on. How many there were."""
        queued = [rid for rid, p in self.pending.items() if not p.started]
        for rid in queued:
            err: Error = {"type": "error", "status": 503, "message": message, "code": code}
            err["retry_after"] = retry_after
            self.pending[rid].queue.put_nowait(err)
            self.finish(rid, cancel=True)
        return len(queued)

    async def stop(self) -> None:
        self._stopping = True
        self._fail_all(503, "the pool is stopping; retry later", "pool_stopping")
        await self._stop_followers()  # first: a leader going away would alarm them
        self._drop_writer()
        proc = self.proc
        if proc is not None and proc.returncode is None:
            _signal(proc, signal.SIGTERM)
            await _wait_or_kill(proc, 5)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        # the task may have been cancelled before it removed what the server left
        await self._reap_server()
        self.state = "stopped"

    # -- requests -----------------------------------------------------------------------

    def counter(self, key: str) -> float:
        return self.base.get(key, 0.0) + float(self.stats.get(key, 0))

    @property
    def queue_length(self) -> int:
        return len(self.pending)

    def submit(self, work: Generate, key: str = NO_KEY) -> tuple[str, Pending]:
        """``work`` queued for the worker under a new id (``work``'s own is replaced)."""
        if self.state == "refused":
            raise Unavailable(f"model {self.spec.name} cannot run: {self.reason}", retry_after=60)
        if self.state != "ready" or self.writer is None:
            raise Unavailable(f"model {self.spec.name} is {self.state}; retry shortly")
        if len(self.pending) >= self.max_queue:
            raise Overloaded(
                f"model {self.spec.name} has {len(self.pending)} requests waiting "
                f"(max_queue {self.max_queue}); retry later",
                retry_after=1,
            )
        # 429 for a key that holds its share of the queue already; the others go on.
        held = sum(1 for p in self.pending.values() if p.key == key)
        if self.queue_share and key != NO_KEY and held >= self.queue_share:
            raise Overloaded(
                f"model {self.spec.name} has {held} requests of key {key} waiting "
                f"(max_queue_per_key {self.queue_share}); retry later",
                retry_after=1,
            )
        rid = f"{self.spec.name}-{next(self._ids)}"
        now = time.monotonic()
        p = Pending(key=key, rid=rid, submitted=now)
        self.pending[rid] = p
        self.book.opened(self.spec.name, rid, key, now)
        self.writer.write(encode({**work, "id": rid}))
        return rid, p

    def finish(self, rid: str, cancel: bool = False) -> None:
        if self.pending.pop(rid, None) is None:
            return
        self.book.closed(rid, time.monotonic())
        if cancel and self.writer is not None:
            with contextlib.suppress(Exception):
                self.writer.write(encode({"type": "cancel", "id": rid}))


def worker_module(engine: str) -> str:
    """The module a model's worker process runs, by its ``engine:``."""
    return engine_kind(engine).worker


async def _wait_or_kill(proc: asyncio.subprocess.Process, seconds: float) -> None:
    """Wait for ``proc`` (already asked to stop) to exit; SIGKILL it after ``seconds``."""
    try:
        await asyncio.wait_for(proc.wait(), seconds)
    except TimeoutError:
        _signal(proc, signal.SIGKILL)
        await proc.wait()


def _signal(proc: asyncio.subprocess.Process, sig: int) -> None:
    """``sig`` to ``proc`` unless it has ended. Not the process's own ``kill`` or
    ``send_signal``: through subprocess.Popen they poll first (waitpid, WNOHANG), which
    reaps a child that has just died before the loop's child watcher can, and the watcher
    then reports 255 for it ("Unknown child process"): a killed worker's -9, or a
    worker's own exit code, was lost that way (CI: the orphaned worker's test, after
    the worker died and its connection closed, the kill after the read loop)."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, sig)
