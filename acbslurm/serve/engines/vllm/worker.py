"""The worker of an ``engine: vllm`` model (``python -m acbslurm.serve.engines.vllm.worker``):
its server (``server``) driven by the model's leases, the client's requests forwarded to
it (``client``) and its answers relayed to the gateway (``answers``).

Leases drive the server's memory. The server is started inside the model's first
lease (``CUDA_VISIBLE_DEVICES`` = the lease's GPUs, none on CPU stand-ins) and the
leases stay pinned to those devices (a sleeping server cannot move). A grant wakes it
(``POST /wake_up``, only when it sleeps); a release with nothing waiting leaves it
awake, its memory reported resident, so back-to-back turns cost nothing; a yield (the
broker asks for the lease back: admitting stops, what runs finishes) or an eviction
(the broker needs the memory of a released lease) puts it to sleep (``POST
/sleep?level=N&mode=wait``). A ``/sleep`` that hangs is bounded by
``ACBSLURM_VLLM_SLEEP_TIMEOUT``: the server is killed, its memory free when its last
process is gone, and only then does the eviction end (the worker exits: the broker's
session with it ends). A server that dies makes the worker exit (its requests get 503
from the gateway) and the gateway restarts the worker, which starts a new server.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

from acbslurm.config import env_float
from acbslurm.errors import BrokerError
from acbslurm.serve import worker
from acbslurm.serve.engines.vllm import nodes
from acbslurm.serve.engines.vllm.answers import Seen, ask_usage, client_chunk, usage_of
from acbslurm.serve.engines.vllm.client import VllmError
from acbslurm.serve.engines.vllm.server import VllmServer, gpu_residue
from acbslurm.serve.placement import large_enough
from acbslurm.serve.pool import weights_bytes
from acbslurm.serve.protocol import Body, Event, Generate, Ready
from acbslurm.serve.routes import BUILTIN, ROUTES, served
from acbslurm.serve.worker import EXIT_BROKER, EXIT_REFUSED, EXIT_THREAD, Worker, longest_token

log = logging.getLogger("acbslurm.serve.engines.vllm")

PROGRESS_EVERY = 1.0  # s between looks at the server's token counters while it computes
# s the worker of a server that died may spend on its clean-up (the session's other
# processes killed and waited for: 5 s at most, then its shared memory) before it exits
DEATH_CLEANUP_S = 15.0
SLEEP_TIMEOUT_ENV = "ACBSLURM_VLLM_SLEEP_TIMEOUT"
# Seconds a /sleep may take before the server is killed. The broker has no deadline of
# its own for an eviction (it waits for the answer: core.Broker.evict_done), so this is
# what bounds one: a hung server is killed and its memory is free when the eviction
# ends. Level 1 of an 80 GB model moves its weights at PCIe speed: seconds.
SLEEP_TIMEOUT = 60.0
RESIDUE_LIMIT_ENV = "ACBSLURM_VLLM_RESIDUE_LIMIT"
# Bytes a sleeping server may keep on each GPU (NVML) before it is treated as a failed
# sleep (killed, restarted): its CUDA context stays, a few hundred MB; vLLM #32714
# left 16 GB per GPU at level 1.
RESIDUE_LIMIT = 2 << 30
# The memory hint of an awake server's request: its memory is already resident (the
# broker counts it), so it needs nothing more; 0 would mean the whole device.
AWAKE_HINT = 1
# s a turn stays open once nothing is in flight or queued, unless another model waits:
# a client's next request comes within it (a client at concurrency 1 sends its next one
# right after its answer), so it does not pay a release and a new grant per request
# (docs/serve.md, "Pool and gateway benchmark").
LINGER = 0.025


def _shut(sock: socket.socket) -> None:
    """End a connection from another thread than its reader's (``close`` would not wake
    a thread blocked reading it)."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


class Request:
    """A request waiting for, or being served in, a turn."""

    def __init__(self, rid: str, msg: Generate) -> None:
        self.rid = rid
        self.msg = msg
        self.cancelled = False
        self.arrived = time.monotonic()
        self.sock: socket.socket | None = None  # its connection to vLLM, once open


class VllmWorker(Worker):
    """A worker whose model runs in a vLLM server (``engine: vllm``).

    Leases drive the server's memory: a grant wakes it (when it sleeps); a release
    with nothing waiting leaves it awake and its memory resident, so back-to-back
    turns of one model cost no sleep and wake; a yield (the broker asks the lease
    back) or an eviction (the broker needs the memory of a released lease) puts it to
    sleep. ``self.memory`` orders the wakes and sleeps of the turn's thread and the
    broker client's eviction thread."""

    server: VllmServer

    def load(self) -> None:
        # after prepare_model_process (the environment it reads) and the broker registration
        from transformers import AutoConfig, AutoTokenizer

        spec = self.spec
        self.tokenizer = AutoTokenizer.from_pretrained(spec.path)
        cfg = AutoConfig.from_pretrained(spec.path)
        own = getattr(cfg, "max_position_embeddings", 0) or getattr(cfg, "n_positions", 0) or 2048
        self.max_context = min(spec.max_context or own, own)
        self.max_prompt_chars = self.max_context * longest_token(self.tokenizer)
        self.weights = weights_bytes(spec.path, spec.dtype)
        # Per device, as the built-in engine and the pool's fit check count it.
        self.share = -(-self.weights // spec.devices)
        self.server = VllmServer(spec, self.device)
        self.level = int(spec.sleep_level or 1)
        self.sleep_timeout = env_float(SLEEP_TIMEOUT_ENV, SLEEP_TIMEOUT)
        self.residue_limit = env_float(RESIDUE_LIMIT_ENV, RESIDUE_LIMIT)
        self.memory = threading.Lock()
        self.awake = False
        self.woken = 0
        self.slept = 0
        self.wake_seconds = 0.0
        self.sleep_seconds = 0.0
        self.residue = 0  # bytes left on the GPUs after the last sleep (NVML)
        self.inflight: set[str] = set()
        self.streamed_at = 0.0  # when a streamed chunk last went to the gateway

    # -- several nodes (procs > 1): engines/vllm/nodes.py -------------------------

    def open_group(self, host: str) -> Any:
        """The group's master address; the gateway starts the headless followers."""
        port = nodes.free_port(host if host != "localhost" else "127.0.0.1")
        self.send({"type": "rendezvous", "address": f"{host}:{port}"})
        return (host, port)

    def join_group(self, store: Any) -> int:
        """vLLM forms the group itself when its server starts (``first_start``)."""
        host, port = store
        self.server.group = (host, port, 0)
        return 0

    def tell_server(self) -> None:
        """The gateway's ``server`` message: the server's pid (its session's id), the
        shared memory files it holds, its folder: what the gateway kills and removes
        when the worker cannot (hung, killed, gone)."""
        proc = self.server.proc
        self.send(
            {
                "type": "server",
                "pid": proc.pid if proc is not None else 0,
                "shm": sorted(self.server.shm),
                "folder": self.server.folder,
            }
        )

    def check_fit(self) -> int:
        self.tell_server()  # its folder, before anything is started
        count = self.spec.devices
        need = self.share + self.spec.headroom
        devs = self.client.devices
        fitting = large_enough(devs, need)
        if len(fitting) < count:
            self.send(
                {
                    "type": "fatal",
                    "exit": EXIT_REFUSED,
                    "message": (
                        f"model {self.spec.name} needs {count} device(s) with "
                        f"{need / 2**20:.1f} MiB each; the broker has {len(devs)} "
                        f"device(s), {len(fitting)} large enough"
                    ),
                }
            )
            return EXIT_REFUSED
        if not Path(self.server.python).is_file():
            self.send(
                {
                    "type": "fatal",
                    "exit": EXIT_REFUSED,
                    "message": (
                        f"model {self.spec.name}: engine vllm: no vLLM environment at "
                        f"{self.server.python} (scripts/setup.sh makes .venv-vllm; or set "
                        "vllm_python: in the pool file)"
                    ),
                }
            )
            return EXIT_REFUSED
        self.client.on_evict(self.on_evict)
        return self.first_start()

    def footprint(self) -> int:
        """Bytes per device of an awake server: its weights' share and its KV cache."""
        return int(self.share + self.spec.headroom)

    def first_start(self) -> int:
        """Start the server inside the model's first lease; release it awake, its memory
        resident (the broker evicts it when another model needs the devices)."""
        lease = self.client.acquire(self.spec.devices, memory=self.footprint())
        resident: dict[str, int] = {}
        try:
            self.server.start(lease.devices)
            self.tell_server()  # from now on, the gateway can end it
            timeout = env_float("ACBSLURM_VLLM_START_TIMEOUT", 600.0)
            try:
                self.server.wait_ready(timeout)
            except (VllmError, OSError) as exc:
                self.server.stop()
                self.send({"type": "fatal", "exit": EXIT_REFUSED, "message": str(exc)})
                return EXIT_REFUSED
            self.awake = True
            self.pin = lease.device_ids  # a sleeping server cannot move
            self.routes = self._routes()
            self.server.remember_shm()
            self.tell_server()
            resident = dict.fromkeys(lease.device_ids, self.footprint())
        finally:
            self.client.release(lease, resident=resident)
        threading.Thread(target=self.watch, name="vllm-watch", daemon=True).start()
        threading.Thread(target=self.beat, name="vllm-progress", daemon=True).start()
        return 0

    def _routes(self) -> list[str]:
        """What the server serves (its OpenAPI schema), less what the pool file leaves
        out; a server without the schema (``disable_fastapi_docs``) is taken at the pool
        file's word, else for a text model's."""
        try:
            engine = self.server.api.routes()
        except (VllmError, OSError, ValueError) as exc:
            log.warning("model %s: cannot read vLLM's routes: %s", self.spec.name, exc)
            engine = list(ROUTES.values()) if self.spec.routes else [*BUILTIN, ROUTES["responses"]]
        return served(self.spec.routes, engine)

    def beat(self) -> None:
        """While requests are in flight, tell the gateway when the server's token
        counters move (``progress``): a non-streamed answer sends nothing else until
        it is whole. A server that does not answer, or whose counters stand still,
        sends nothing, and the gateway's heartbeat declares the model hung."""
        last: float | None = None
        while not self.server.stopping:
            time.sleep(PROGRESS_EVERY)
            with self.cond:
                busy = bool(self.inflight)
            # A stream's chunks are progress already: no look at the counters while
            # they flow. A look costs vLLM's own event loop, which streams the tokens:
            # it renders all of its metrics for it (docs/benchmarks.md, "Serve on vLLM").
            if not busy:
                last = None
                continue
            if time.monotonic() - self.streamed_at < PROGRESS_EVERY:
                continue  # the last look's count stays: any growth since is progress
            now = self.server.api.progress()
            if now is not None and last is not None and now != last:
                self.send({"type": "progress"})
            last = now if now is not None else last

    def watch(self) -> None:
        """A server that dies takes the worker with it (its requests get 503; the
        gateway restarts the worker, which starts a new server)."""
        proc = self.server.proc
        assert proc is not None
        code = proc.wait()
        if not self.server.stopping:
            self.server_died(code)

    def server_died(self, code: int) -> None:
        log.error("model %s: vLLM exited (%s):\n%s", self.spec.name, code, self.server.log_tail())
        # The worker goes whatever the clean-up meets: until it exits, its model's
        # requests reach a dead server, and no heartbeat notices an idle worker.
        deadline = threading.Timer(DEATH_CLEANUP_S, os._exit, (EXIT_THREAD,))
        deadline.daemon = True
        deadline.start()
        self.server.stop()
        for h in logging.getLogger().handlers:
            h.flush()
        os._exit(EXIT_THREAD)

    # -- sleep and wake -------------------------------------------------------------------

    def on_evict(self, devices: list[str]) -> None:  # noqa: ARG002
        """The broker needs the memory of a released lease that stayed resident. Nothing
        runs (the lease is back): the server sleeps, and the eviction ends (the client
        answers when this returns) once /sleep has returned and the memory is measured
        free, or the server is dead."""
        self.go_to_sleep("the broker's eviction")
        self.send_stats()

    def wake_up(self) -> float:
        """A grant: ``/wake_up`` when the server sleeps; the seconds it took."""
        with self.memory:
            if self.awake:
                return 0.0
            t0 = time.monotonic()
            self.server.api.wake(self.level)
            took = time.monotonic() - t0
            self.awake = True
            self.woken += 1
            self.wake_seconds += took
            return took

    def go_to_sleep(self, why: str) -> None:
        """``/sleep?level=N&mode=wait`` when the server is awake. One that does not answer
        within the sleep timeout, or leaves more than the residue limit on a GPU, is
        killed (its memory is free once its processes are gone) and the worker exits:
        the gateway fails its requests with 503 and starts a new one."""
        with self.memory:
            if not self.awake:
                return
            t0 = time.monotonic()
            try:
                self.server.api.sleep(self.level, timeout=self.sleep_timeout)
            except (VllmError, OSError) as exc:
                self.sleep_failed(
                    f"/sleep for {why} failed after {time.monotonic() - t0:.1f} s: {exc}"
                )
            self.awake = False
            self.slept += 1
            self.sleep_seconds += time.monotonic() - t0
            self.residue = self.measure_residue()
            if self.residue > self.residue_limit:
                self.sleep_failed(
                    f"asleep (level {self.level}), vLLM still holds "
                    f"{self.residue / 2**30:.1f} GiB on its GPUs"
                )

    def measure_residue(self) -> int:
        """The most bytes the server's processes hold on one of its GPUs, from NVML. On
        CPU stand-ins there is nothing to measure (vLLM's sleep frees nothing there and
        the memory is the host's): 0."""
        if self.device != "cuda" or not self.pin:
            return 0
        return gpu_residue(self.pin, self.server.pids())

    def sleep_failed(self, reason: str) -> NoReturn:
        message = f"model {self.spec.name}: {reason}; vLLM killed, restarting"
        log.error("%s", message)
        self.server.kill()
        self.send({"type": "fatal", "exit": EXIT_THREAD, "message": message})
        for h in logging.getLogger().handlers:
            h.flush()
        # The broker sees the session end (its residency forgotten) only now, when no
        # process of the server is left.
        os._exit(EXIT_THREAD)

    def send_stats(self) -> None:
        self.send(
            {
                "type": "stats",
                "gpu_wait_seconds": self.gpu_wait,
                "turns": self.turns,
                "swaps_in": self.woken,
                "swaps_out": self.slept,
                "swap_in_seconds": self.wake_seconds,
                "swap_out_seconds": self.sleep_seconds,
                "resident_bytes": self.weights if self.awake else 0,
                "evicted_bytes": 0 if self.awake else self.weights,
                "weights_bytes": self.weights,
                "sleep_residue_bytes": self.residue,
                "queued": len(self.queue),
            }
        )

    def exit(self, code: int) -> NoReturn:
        """The gateway closed the connection or stops the worker: the server goes first
        (the gateway kills the worker 5 s after its SIGTERM; the server's parent-death
        signal covers that too, but not its folder)."""
        server = getattr(self, "server", None)
        if server is not None:
            server.stop(grace=2.5)
        os._exit(code)

    def on_start(self) -> None:
        signal.signal(signal.SIGTERM, self.on_sigterm)

    def on_sigterm(self, signum: int, frame: Any) -> None:  # noqa: ARG002
        # Once: in a job, Slurm's SIGTERM and the gateway's arrive together, and a
        # second handler would wait forever on the stop lock the first one holds
        # (same thread), until a SIGKILL left the server's folder behind.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        self.exit(0)

    def ready_message(self) -> Ready:
        return {
            "type": "ready",
            "weights_bytes": self.weights,
            "max_context": self.max_context,
            "max_prompt_chars": self.max_prompt_chars,
            "routes": self.routes,
        }

    # -- requests -------------------------------------------------------------------------

    def accept(self, msg: Generate) -> None:
        rid = str(msg["id"])
        d = Request(rid, msg)
        self.enqueue(rid, d)

    def cancel(self, rid: str) -> None:
        """Also a request in flight: its connection to vLLM is shut down, so vLLM aborts
        it (a non-streamed one too, whose answer would otherwise be computed whole)
        and the thread waiting for its answer is freed at once."""
        super().cancel(rid)
        with self.cond:
            d = self.by_id.get(rid)
            sock = d.sock if d is not None else None
        if sock is not None:
            _shut(sock)

    def opened(self, d: Request) -> Callable[[socket.socket], None]:
        """What ``forward`` calls with ``d``'s connection: kept for a cancel, or shut
        down now when the cancel came first."""

        def keep(sock: socket.socket) -> None:
            with self.cond:
                d.sock = sock
                cancelled = d.cancelled
            if cancelled:
                _shut(sock)

        return keep

    def body(self, msg: Generate) -> tuple[str, dict[str, Any] | bytes, bool]:
        """The client's body for vLLM, whole: the model name mapped to the server's, the
        pool's defaults for what the client left out (on the routes that generate),
        and usage asked for in a stream (the gateway counts tokens); with whether the
        client asked for it itself. An upload (``/v1/audio/*``) goes as it came."""
        spec = self.spec
        route = str(msg.get("route") or "/v1/completions")
        if "upload" in msg:
            return route, base64.b64decode(str(msg["upload"])), True
        body = dict(msg.get("body") or {})
        body["model"] = spec.name
        if route == "/v1/responses":
            body.setdefault("max_output_tokens", spec.max_tokens)
        elif route != "/v1/embeddings" and not {"max_tokens", "max_completion_tokens"} & set(body):
            body["max_tokens"] = spec.max_tokens
        if route != "/v1/embeddings":
            body.setdefault("temperature", spec.temperature)
            body.setdefault("top_p", spec.top_p)
        return route, body, ask_usage(body, route)

    def serve_one(self, d: Request, timing: dict[str, float]) -> None:
        path, body, asked = self.body(d.msg)
        kind = str(d.msg.get("content_type") or "application/json")
        try:
            answer, got_kind = self.server.api.forward(path, body, self.opened(d), kind)
        except VllmError as exc:
            self.fail(d.rid, exc.status, exc.message, exc.param, exc.code)
            return
        except OSError as exc:
            if not d.cancelled:  # a cancelled one's connection was shut down: no error
                self.engine_failed(d, exc)
            return
        self.send({"type": "accepted", "id": d.rid})
        stream = "text/event-stream" in got_kind
        try:
            got = self.relay(d, answer, timing["started"], stream, asked, got_kind)
        except (OSError, ValueError) as exc:
            if not d.cancelled:
                self.engine_failed(d, exc)
            return
        if got is None:
            return  # cancelled
        seen, tail = got
        self.requests += 1
        self.send(seen.done(d.rid, tail, timing, stream and path == "/v1/responses"))

    def engine_failed(self, d: Request, exc: Exception) -> None:
        """``d`` lost its server (it died, or cut the answer): 503, never a partial
        answer passed on as whole."""
        self.fail(d.rid, 503, f"model {self.spec.name}: vLLM: {exc}", code="engine_failed")

    # complexity: the loop every streamed chunk of every request takes (cancel, a whole
    # answer, vLLM's error event, the held usage event): one pass, no call per chunk
    # beyond the chunk's own read.
    def relay(
        self,
        d: Request,
        answer: Iterator[tuple[str, bytes]],
        started: float,
        stream: bool,
        asked: bool,
        kind: str = "application/json",
    ) -> tuple[Seen, tuple[str, str] | None] | None:
        """Pass vLLM's answer on as it is (``event``: one streamed chunk, with its event
        name; ``body``: a whole answer, with its content type): what was seen of it,
        and the stream's last event that carried its usage (held back for the
        gateway, which adds the pool's metrics to it: the ``done`` message's ``tail``);
        None when the request was cancelled (its connection closed: vLLM aborts it).
        The usage the worker asked for itself is left out of the client's stream."""
        seen = Seen(started)
        held: tuple[str, str] | None = None
        for name, data in answer:
            if d.cancelled:
                close = getattr(answer, "close", None)
                if close is not None:
                    close()
                return None
            if not stream:
                seen.read(data, kind)
                # a whole answer's first output is the answer (a response, an embedding,
                # a transcription have no choices to find text in)
                seen.first = seen.first or time.monotonic() - started
                whole: Body = {"type": "body", "id": d.rid, "data": data.decode()}
                whole["content_type"] = kind
                self.send(whole)
                continue
            ev = seen.read(data)
            if ev is not None and "error" in ev and not ev.get("choices"):
                # vLLM's own error event (its engine process died mid-stream), which
                # it follows with [DONE]: the stream was cut, and the gateway ends it
                # with an error event and no [DONE].
                close = getattr(answer, "close", None)
                if close is not None:
                    close()
                err = ev.get("error")
                message = str(err.get("message") if isinstance(err, dict) else err)[:500]
                raise ConnectionError(f"the stream ended with an error: {message}")
            # None: a plain chunk, passed on unparsed (Seen.read)
            out = data.decode() if ev is None else client_chunk(ev, data, asked)
            if held is not None:  # not the last after all
                self._event(d.rid, held)
                held = None
            if out is None:
                continue
            if ev is not None and usage_of(ev):
                held = (name, out)
            else:
                self._event(d.rid, (name, out))
            self.streamed_at = time.monotonic()  # progress: no look needed (beat)
        return seen, held

    def _event(self, rid: str, ev: tuple[str, str]) -> None:
        msg: Event = {"type": "event", "id": rid, "data": ev[1]}
        if ev[0]:
            msg["event"] = ev[0]
        self.send(msg)

    def _run(self, d: Request, timing: dict[str, float]) -> None:
        try:
            self.serve_one(d, timing)
        finally:
            with self.cond:
                self.by_id.pop(d.rid, None)
                self.inflight.discard(d.rid)
                self.cond.notify_all()

    # -- a turn (serve.worker.Worker.turn drives these) ---------------------------------

    def bring_in(self, devices: list[str]) -> float:  # noqa: ARG002 - the server's own, pinned
        return self.wake_up()

    def on_yield(self) -> None:
        """Nothing in flight, and another model waits for the devices: the memory goes
        too. Otherwise (no yield) the server stays awake, its memory resident."""
        self.go_to_sleep("a yield")

    def resident(self, devices: list[str]) -> dict[str, int]:
        return dict.fromkeys(devices, self.footprint()) if self.awake else {}

    def acquire(self) -> tuple[Any, float]:
        """The model's lease, pinned to its server's devices, and when it was granted.
        The memory hint is nothing more when the server is awake (its memory is
        resident), else its footprint; a server evicted while its request waited asks
        again with the footprint."""
        t0 = time.monotonic()
        try:
            while True:
                awake = self.awake
                hint = AWAKE_HINT if awake else self.footprint()
                lease = self.client.acquire(self.spec.devices, memory=hint, pin=self.pin)
                if self.awake or not awake:
                    break
                self.client.release(lease, resident={})
        except BrokerError as exc:
            for d in self.take(len(self.queue)):
                self.fail(d.rid, 503, f"model {self.spec.name}: GPU broker: {exc}")
            self.server.stop()
            os._exit(EXIT_BROKER)
        granted = time.monotonic()
        self.gpu_wait += granted - t0
        self.turns += 1
        return lease, granted

    def compute(self, lease: Any, granted: float, restore: float) -> None:
        limit = self.spec.max_batch
        first = True
        idle_since: float | None = None
        while True:
            with self.cond:
                admit = first or not lease.yield_requested.is_set()
                room = limit - len(self.inflight)
            if admit and room > 0:
                for d in self.take(room):
                    # on a thread of its own; the turn's first requests waited for the
                    # grant (and the wake's restore)
                    timing = {
                        "wait_s": max(0.0, granted - d.arrived) if first else 0.0,
                        "restore_s": restore if first else 0.0,
                        "started": time.monotonic(),
                    }
                    with self.cond:
                        self.inflight.add(d.rid)
                    threading.Thread(
                        target=self._run, args=(d, timing), name=f"req-{d.rid}", daemon=True
                    ).start()
            first = False
            with self.cond:
                idle_since, wait = self._idle(lease, idle_since)
                if wait <= 0:
                    return
                self.cond.wait(wait)

    def _idle(self, lease: Any, idle_since: float | None) -> tuple[float | None, float]:
        """(since when the turn has had nothing to do, how long to wait now); a wait of 0
        ends the turn. With nothing in flight or queued and no yield asked, the turn
        lingers ``LINGER`` for a next request. Called with ``self.cond`` held."""
        if self.inflight or (self.queue and not lease.yield_requested.is_set()):
            return None, 0.05
        if lease.yield_requested.is_set():
            return idle_since, 0.0
        now = time.monotonic()
        idle_since = now if idle_since is None else idle_since
        return idle_since, LINGER - (now - idle_since)


def main(argv: list[str] | None = None) -> int:
    """``python -m acbslurm.serve.engines.vllm.worker``: the worker of an ``engine: vllm`` model."""
    return worker.main(argv, VllmWorker)


if __name__ == "__main__":
    import sys

    sys.exit(main())
