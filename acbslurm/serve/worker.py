"""What every model's worker process does alike, whatever its engine.

A worker serves one model: it registers with the broker, loads the model (the
engine's part), tells the gateway it is ready and then serves the gateway on one
unix socket (``protocol``). A reader thread takes the gateway's messages, a tokenizer
thread takes requests in (never on the reader, so cancels and newcomers never wait
behind a long prompt), and the main loop runs turns: wait for a request, acquire the
model's lease, compute, release. A worker that loses a thread exits (``die``) and the
gateway restarts it; it exits too when the gateway's connection closes or the broker
goes away.

The engines (``serve.engines``) subclass ``Worker``: ``engines.builtin.worker`` (the
project's own decode loop) and ``engines.vllm`` (a supervised vLLM server). Each is run
as ``python -m`` its module, whose ``main`` calls this module's ``main`` with its class.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import logging
import os
import queue
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, NoReturn

from acbslurm.config import env_float
from acbslurm.errors import BrokerError
from acbslurm.serve.api import prompt_chars
from acbslurm.serve.errors import ProtocolError, TurnBroken
from acbslurm.serve.modelproc import prepare_model_process
from acbslurm.serve.pool import ModelSpec
from acbslurm.serve.protocol import MAX_LINE, Generate, Ready, ToGateway, decode_to_worker, encode

log = logging.getLogger("acbslurm.serve.worker")

EXIT_REFUSED = 3  # the model cannot run here (gang or memory cannot fit): no restart
EXIT_BROKER = 4  # the broker went away
EXIT_GROUP = 5  # a follower of the group died or hung: the gateway restarts the group
EXIT_THREAD = 6  # one of the worker's threads failed: the gateway restarts the worker
BIG_PROMPT = 1 << 20  # characters: after tokenizing more, the heap is trimmed


# Says the worker's last words to the gateway (the Worker's send, once connected).
_last_words: list[Callable[[ToGateway], None]] = []


def die(reason: str) -> NoReturn:
    """End the process, the reason logged: a worker that lost a thread (the reader,
    the tokenizer, the decoding loop) would otherwise live on and never answer, its
    requests waiting out their timeout while /health says ok. Its exit fails them
    with 503 at once and the gateway restarts it.

    The gateway is told the code and the reason first, on the worker's socket: the
    exit status alone can be lost where another part of the gateway's process reaps
    children (asyncio then reports 255), and the reason is what /health shows."""
    log.critical("worker exits: %s", reason)
    for h in logging.getLogger().handlers:
        h.flush()
    message = f"the worker exited ({EXIT_THREAD}): {reason}; restarting"
    for say in _last_words:
        with contextlib.suppress(Exception):  # dying anyway: nothing may stop the exit
            say({"type": "fatal", "exit": EXIT_THREAD, "message": message})
    os._exit(EXIT_THREAD)


def _thread_failed(args: threading.ExceptHookArgs) -> None:
    name = args.thread.name if args.thread is not None else "?"
    log.critical("thread %s failed", name, exc_info=args.exc_value)
    die(f"thread {name} failed: {args.exc_type.__name__}: {args.exc_value}")


def trim_heap() -> None:
    """Give the C heap's free pages back to the system (glibc keeps them otherwise:
    one huge prompt's tokenizing left the worker several times its size for good:
    docs/benchmarks.md, "Serve")."""
    with contextlib.suppress(OSError, AttributeError):  # AttributeError: not glibc
        ctypes.CDLL(None).malloc_trim(0)


class Worker:
    def __init__(self, spec: ModelSpec, conn: socket.socket, broker: str, device: str) -> None:
        self.spec = spec
        self.conn = conn
        self.broker_address = broker
        self.device = device
        self.wlock = threading.Lock()
        _last_words.append(self.last_words)
        self.cond = threading.Condition()
        self.queue: deque[Any] = deque()
        self.by_id: dict[str, Any] = {}
        self.token_delay = env_float("ACBSLURM_SERVE_TOKEN_DELAY", 0.0)
        self.gpu_wait = 0.0
        self.turns = 0
        self.requests = 0
        self.pin: list[str] | None = None
        self.procs = spec.procs
        self.leader: Any = None  # group.Leader of a built-in worker group
        # Held while a turn brings the memory in and computes (an engine whose eviction
        # must wait for that sets its own lock).
        self.turn_lock: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        # Requests are tokenized on a thread of their own (``tokenize_loop``), never on
        # the reader (cancels and newcomers would wait behind a long prompt) nor on the
        # decoding loop. A cancel that comes while its request is there is kept for it.
        self.intake: queue.SimpleQueue[Generate] = queue.SimpleQueue()
        self.tokenizing: set[str] = set()
        self.cancelled_early: set[str] = set()

    # -- I/O ----------------------------------------------------------------------------

    def last_words(self, msg: ToGateway) -> None:
        """``msg`` sent on the way out (``die``): never blocking for long, even when the
        thread that failed held the socket's lock, and never exiting by itself."""
        if self.wlock.acquire(timeout=1.0):
            try:
                self.conn.sendall(encode(msg))
            finally:
                self.wlock.release()

    def on_start(self) -> None:
        """Once the process is connected to the gateway (an engine's signal handlers)."""

    def exit(self, code: int) -> NoReturn:
        """End the process now (an engine with a server of its own stops it first)."""
        os._exit(code)

    def send(self, msg: ToGateway) -> None:
        data = encode(msg)
        with self.wlock:
            try:
                self.conn.sendall(data)
            except OSError:
                self.exit(0)  # the gateway is gone: nothing left to serve

    def fail(
        self, rid: str, status: int, message: str, param: str | None = None, code: str = ""
    ) -> None:
        self.send(
            {
                "type": "error",
                "id": rid,
                "status": status,
                "message": message,
                "param": param,
                "code": code,
            }
        )

    # -- what an engine provides ----------------------------------------------------------

    def load(self) -> None:
        """Load the model (before the fit check; an exception refuses the model)."""
        raise NotImplementedError

    def check_fit(self) -> int:
        """0 when the model fits the broker's devices, else EXIT_REFUSED (gateway told)."""
        raise NotImplementedError

    def ready_message(self) -> Ready:
        """The ``ready`` message: weights, context, the prompt's bound in characters."""
        raise NotImplementedError

    def send_stats(self) -> None:
        """The ``stats`` message (counters the gateway's /metrics shows)."""
        raise NotImplementedError

    def accept(self, msg: Generate) -> None:
        """A ``generate`` request, on the tokenizer thread: queue it or fail it."""
        raise NotImplementedError

    def acquire(self) -> tuple[Any, float]:
        """The model's lease (the broker's grant) and when it was granted."""
        raise NotImplementedError

    def turn_devices(self, lease: Any) -> list[str]:
        """The lease's device ids, in the order the engine uses them."""
        return list(lease.device_ids)

    def bring_in(self, devices: list[str]) -> float:
        """The model's memory onto ``devices`` (a restore, a wake); the seconds it took."""
        raise NotImplementedError

    def compute(self, lease: Any, granted: float, restore: float) -> None:
        """Serve the queue while the lease is held: newcomers are admitted until the
        broker asks the lease back; returns once nothing is in flight."""
        raise NotImplementedError

    def on_yield(self) -> None:
        """The broker asked the lease back (someone waits): by default the memory stays
        resident (the broker evicts it if the next holder needs it)."""

    def resident(self, devices: list[str]) -> dict[str, int]:
        """The bytes the model leaves on each of ``devices`` at the release."""
        raise NotImplementedError

    def broken(self, reason: str) -> NoReturn:
        """The engine cannot go on (``TurnBroken``): the process ends."""
        die(reason)

    def turn(self) -> None:
        """Wait for a request, then one lease's worth of computing, the same steps for
        every engine: the lease (``acquire``), the model's memory onto its devices
        (``bring_in``), the queue served (``compute``), what a yield asks of the engine
        (``on_yield``), the release with what stays resident (``resident``), the lease's
        span told to the gateway, the counters. ``busy`` messages around ``compute``
        arm the gateway's heartbeat (``supervisor``). A ``TurnBroken`` (a peer of a built-in
        group failed) releases with nothing resident and ends the process."""
        with self.cond:
            while not self.queue:
                self.cond.wait()
        lease, granted = self.acquire()
        devices = self.turn_devices(lease)
        failure: TurnBroken | None = None
        try:
            with self.turn_lock:
                restore = self.bring_in(devices)
                # The gateway's heartbeat: from here to the end of compute, a worker
                # that sends nothing for its hang_timeout is hung (supervisor).
                # The lease goes with it: a worker that dies mid-turn has its lease
                # counted to its death (usagebook).
                self.send({"type": "busy", "busy": True, "granted": granted, "devices": devices})
                try:
                    self.compute(lease, granted, restore)
                finally:
                    self.send({"type": "busy", "busy": False})
            if lease.yield_requested.is_set():
                self.on_yield()
        except TurnBroken as exc:
            failure = exc
        finally:
            # The worker's own view of its lease (monotonic clock, shared by the host's
            # processes): from the grant it read to the release it sent. The tests
            # check that no two models' views of one device overlap.
            released = time.monotonic()
            resident = {} if failure is not None else self.resident(devices)
            self.client.release(lease, resident=resident)
            self.send(
                {"type": "lease", "devices": devices, "granted": granted, "released": released}
            )
        if failure is not None:
            self.broken(str(failure))
        self.send_stats()

    def open_group(self, host: str) -> Any:
        """With ``procs > 1``: the group's rendezvous (an engine with groups)."""
        raise NotImplementedError(f"{type(self).__name__}: procs > 1 is not supported")

    def join_group(self, store: Any) -> int:  # noqa: ARG002
        """0 when the group formed (an engine with groups)."""
        return 0

    def enqueue(self, rid: str, d: Any) -> None:
        """Queue request ``d`` for the next turn, unless its cancel came while it was
        being taken in (on the tokenizer thread)."""
        with self.cond:
            if rid in self.cancelled_early:
                return
            self.by_id[rid] = d
            self.queue.append(d)
            self.cond.notify()

    def register(self) -> int:
        """0 when registered with the broker, else the exit code (the gateway is told why).

        Done before loading the model: while the broker is away, a restarted worker
        fails in a fraction of a second instead of after importing torch."""
        from acbslurm.broker.client import BrokerClient  # grpc: the optional broker extra

        try:
            self.client = BrokerClient(self.broker_address, name=f"serve:{self.spec.name}")
        except BrokerError as exc:
            self.send({"type": "fatal", "message": str(exc), "exit": EXIT_BROKER})
            return EXIT_BROKER
        return 0

    # -- gateway messages ---------------------------------------------------------------

    def reader(self) -> None:
        f = self.conn.makefile("rb")
        while True:
            line = f.readline(MAX_LINE)
            if not line:
                self.exit(0)  # the gateway closed us
            try:
                msg = decode_to_worker(line)
            except ProtocolError as exc:
                log.warning("a line from the gateway skipped: %s", exc)
                continue
            match msg["type"]:
                case "generate":
                    with self.cond:
                        self.tokenizing.add(msg["id"])
                    self.intake.put(msg)
                case "cancel":
                    self.cancel(msg["id"])

    def cancel(self, rid: str) -> None:
        with self.cond:
            if rid in self.tokenizing:
                self.cancelled_early.add(rid)
            d = self.by_id.get(rid)
            if d is not None:
                d.cancelled = True
                if d in self.queue:  # not started: no turn needed for it
                    self.queue.remove(d)
                    self.by_id.pop(d.rid, None)

    def tokenize_loop(self) -> None:
        while True:
            msg = self.intake.get()
            rid = msg["id"]
            big = prompt_chars(msg) > BIG_PROMPT
            try:
                self.accept(msg)
            finally:
                with self.cond:
                    self.tokenizing.discard(rid)
                    self.cancelled_early.discard(rid)
            del msg  # the prompt's text, before the heap is trimmed
            if big:
                trim_heap()

    def take(self, limit: int) -> list[Any]:
        out: list[Any] = []
        with self.cond:
            while self.queue and len(out) < limit:
                d = self.queue.popleft()
                if d.cancelled:
                    self.by_id.pop(d.rid, None)
                    continue
                out.append(d)
        return out


def longest_token(tokenizer: Any) -> int:
    """Characters of the vocabulary's longest token (as stored: byte-level tokens have
    a character per byte, so never fewer than they decode to). A prompt of more than
    ``max_context`` times this many characters has more than ``max_context`` tokens,
    whatever it says: the gateway refuses it before anyone tokenizes it."""
    return max((len(t) for t in tokenizer.get_vocab()), default=1) or 1


def start(w: Worker, store: Any) -> int:
    """Register, load, form the group (if any), check the fit: 0, or the exit code
    (the gateway has been told why)."""
    code = w.register()
    if code:
        return code
    try:
        w.load()
    except Exception as exc:
        w.send(
            {
                "type": "fatal",
                "exit": EXIT_REFUSED,
                "message": f"cannot load {w.spec.path}: {exc}",
            }
        )
        return EXIT_REFUSED
    if store is not None:
        code = w.join_group(store)
        if code:
            return code
    return w.check_fit()


def main(argv: list[str] | None, cls: type[Worker]) -> int:
    """The worker process of ``cls``, an engine's worker (called by its module's main)."""
    p = argparse.ArgumentParser(prog=cls.__module__)
    p.add_argument("--spec", required=True, help="the model's spec as JSON")
    p.add_argument("--socket", required=True)
    p.add_argument("--broker", required=True)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument(
        "--rendezvous-host",
        default="127.0.0.1",
        help="with procs > 1: the address the followers reach this process at",
    )
    args = p.parse_args(argv)
    prepare_model_process()
    spec = ModelSpec.from_dict(json.loads(args.spec))
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(args.socket)
    srv.listen(1)
    srv.settimeout(120)
    try:
        conn, _ = srv.accept()
    except TimeoutError:
        print("worker: no gateway connected within 120 s", file=sys.stderr)
        return 1
    finally:
        srv.close()
        os.unlink(args.socket)
        # The gateway's folder for the socket, now empty (the gateway removes it too;
        # this covers a gateway that was killed).
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(args.socket))
    conn.settimeout(None)
    w = cls(spec, conn, args.broker, args.device)
    w.on_start()
    store = w.open_group(args.rendezvous_host) if w.procs > 1 else None
    code = start(w, store)
    if code:
        return code
    w.send(w.ready_message())
    w.send_stats()
    threading.excepthook = _thread_failed
    threading.Thread(target=w.reader, name="gateway-reader", daemon=True).start()
    threading.Thread(target=w.tokenize_loop, name="tokenizer", daemon=True).start()
    try:
        while True:
            w.turn()
    except Exception as exc:
        log.critical("the decoding loop failed", exc_info=True)
        die(f"the decoding loop failed: {type(exc).__name__}: {exc}")
