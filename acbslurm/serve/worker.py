"""One model's long-lived worker process: ``python -m acbslurm.serve.worker``.

It loads the model once, registers with the broker and serves the gateway on one
unix socket. Requests queue while the model waits for its gang; each turn acquires
the gang (memory hint: what is not resident yet plus headroom), restores the
weights if they were evicted, decodes every queued request (up to ``max_batch``,
admitting newcomers while the lease is not asked to yield), and releases with the
weights' share as resident bytes. When the broker asks for the memory, the weights
go to host memory in place (``residency``). The worker exits when the gateway's
connection closes or the broker goes away (the gateway then restarts it).

With ``procs: N`` this process is the leader (rank 0) of a worker group: it runs the
first pipeline stage, holds the one gang lease for all the group's devices, and
commands the followers (``follower``, ``pipeline``) to restore, compute and evict
their stages; a group whose follower fails exits (EXIT_GROUP) and is restarted.
"""

from __future__ import annotations

import argparse
import contextlib
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
from acbslurm.serve.api import prompt_chars
from acbslurm.serve.gang import Gang, large_enough
from acbslurm.serve.modelproc import load_causal_lm, prepare_model_process
from acbslurm.serve.protocol import MAX_LINE, decode, encode

log = logging.getLogger("acbslurm.serve.worker")

EXIT_REFUSED = 3  # the model cannot run here (gang or memory cannot fit): no restart
EXIT_BROKER = 4  # the broker went away
EXIT_GROUP = 5  # a follower of the group died or hung: the gateway restarts the group
EXIT_THREAD = 6  # one of the worker's threads failed: the gateway restarts the worker
BIG_PROMPT = 1 << 20  # characters: after tokenizing more, the heap is trimmed


# Says the worker's last words to the gateway (the Worker's send, once connected).
_last_words: list[Callable[[dict[str, Any]], None]] = []


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
    one huge prompt's tokenizing left the worker at 4x its size for good)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):  # AttributeError: not glibc
        ctypes.CDLL(None).malloc_trim(0)


class Worker:
    def __init__(self, spec: dict[str, Any], conn: socket.socket, broker: str, device: str) -> None:
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
        self.procs = int(spec.get("procs", 1))
        self.leader: Any = None  # pipeline.Leader of a worker group
        # Requests are tokenized on a thread of their own (``tokenize_loop``), never on
        # the reader (cancels and newcomers would wait behind a long prompt) nor on the
        # decoding loop. A cancel that comes while its request is there is kept for it.
        self.intake: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        self.tokenizing: set[str] = set()
        self.cancelled_early: set[str] = set()

    # -- I/O ----------------------------------------------------------------------------

    def last_words(self, msg: dict[str, Any]) -> None:
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

    def send(self, msg: dict[str, Any]) -> None:
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

    # -- start --------------------------------------------------------------------------

    def ready_message(self) -> dict[str, Any]:
        return {
            "type": "ready",
            "weights_bytes": self.gang.weights,
            "max_context": self.max_context,
            "max_prompt_chars": self.max_prompt_chars,
        }

    def load(self) -> None:
        from transformers import AutoTokenizer

        from acbslurm.serve.generate import local_forward
        from acbslurm.serve.residency import Residency

        self.tokenizer = AutoTokenizer.from_pretrained(self.spec["path"])
        # The tokenizing thread's own copy: a fast tokenizer is one Rust object, and
        # the decoding loop's detokenizing must not share it with a concurrent encode.
        self.encoder = AutoTokenizer.from_pretrained(self.spec["path"])
        model, self.dtype = load_causal_lm(self.spec)
        cfg = model.config
        own = getattr(cfg, "max_position_embeddings", 0) or getattr(cfg, "n_positions", 0) or 2048
        self.max_context = min(self.spec["max_context"] or own, own)
        self.eos_id = self.tokenizer.eos_token_id
        self.max_prompt_chars = self.max_context * longest_token(self.tokenizer)
        self.vocab = int(model.get_output_embeddings().weight.shape[0])
        if self.procs > 1:
            from acbslurm.serve.stages import make_stage

            self.stage = make_stage(model, 0, self.procs)
        self.model = model
        self.residency = Residency(model, self.device)
        self.forward = local_forward(model)
        self.gang = Gang(self.residency, self.spec["devices"], self.procs, self.device)

    # -- the worker group (procs > 1) ----------------------------------------------------

    def open_group(self, host: str) -> Any:
        """Host the group's rendezvous and tell the gateway where, so it starts the
        followers (while this process loads its own stage)."""
        from acbslurm.serve import pipeline

        store = pipeline.rendezvous(host, 0, 0, self.procs)
        self.send({"type": "rendezvous", "address": f"{host}:{store.port}"})
        return store

    def join_group(self, store: Any) -> int:
        """0 when every follower loaded its stage, else EXIT_REFUSED (gateway told)."""
        from acbslurm.serve import pipeline

        pipeline.join(store, 0, self.procs)
        mine = pipeline.Peer(True, "", self.residency.weights)
        peers = pipeline.exchange(mine, self.procs)[1:]
        failed = [p.message for p in peers if not p.ok]
        dog = pipeline.Watchdog(pipeline.stage_timeout(), self.group_failed)
        self.leader = pipeline.Leader(self.stage, self.procs, self.vocab, dog)
        if failed:
            self.leader.stop()
            self.send({"type": "fatal", "exit": EXIT_REFUSED, "message": "; ".join(failed)})
            return EXIT_REFUSED
        self.gang.set_peers([p.weights for p in peers], self.leader)
        self.forward = self.leader
        return 0

    def group_failed(self, reason: str) -> None:
        """A follower died or hung: its requests fail (503 from the gateway), the
        process exits so that the broker frees the lease and the gateway restarts
        the whole group."""
        log.error("model %s: worker group failed: %s", self.spec["name"], reason)
        self.send({"type": "group_failed", "message": reason})
        os._exit(EXIT_GROUP)

    def register(self) -> int:
        """0 when registered with the broker, else the exit code (the gateway is told why).

        Done before loading the model: while the broker is away, a restarted worker
        fails in a fraction of a second instead of after importing torch."""
        from acbslurm.broker.client import BrokerClient
        from acbslurm.errors import BrokerError

        try:
            self.client = BrokerClient(self.broker_address, name=f"serve:{self.spec['name']}")
        except BrokerError as exc:
            self.send({"type": "fatal", "message": str(exc), "exit": EXIT_BROKER})
            return EXIT_BROKER
        return 0

    def check_fit(self) -> int:
        """0 when the gang fits the broker's devices, else EXIT_REFUSED (gateway told)."""
        from acbslurm.serve.placement import from_env

        count = self.spec["devices"]
        need = self.gang.share + self.spec["headroom"]
        devs = self.client.devices
        self.gang.plan([d.node for d in devs], from_env().nodes)
        fitting = large_enough(devs, need)
        if not self.gang.placeable(devs, need):
            where = ""
            if self.gang.per_node:
                where = f", {self.gang.per_node} of them on each of its node(s)"
            self.send(
                {
                    "type": "fatal",
                    "exit": EXIT_REFUSED,
                    "message": (
                        f"model {self.spec['name']} needs {count} device(s) with "
                        f"{need / 2**20:.1f} MiB each{where} (weights "
                        f"{self.gang.weights / 2**20:.1f} MiB / {count} + headroom); "
                        f"the broker has {len(devs)} device(s), "
                        f"{len(fitting)} large enough"
                    ),
                }
            )
            return EXIT_REFUSED
        self.client.on_evict(self.on_evict)
        return 0

    # -- gateway messages ---------------------------------------------------------------

    def reader(self) -> None:
        f = self.conn.makefile("rb")
        while True:
            line = f.readline(MAX_LINE)
            if not line:
                self.exit(0)  # the gateway closed us
            try:
                msg = decode(line)
            except ValueError:
                continue
            if msg.get("type") == "generate":
                with self.cond:
                    self.tokenizing.add(str(msg.get("id")))
                self.intake.put(msg)
            elif msg.get("type") == "cancel":
                self.cancel(str(msg.get("id")))

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
            rid = str(msg.get("id"))
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

    def prompt_text(self, msg: dict[str, Any]) -> str:
        if "messages" not in msg:
            return str(msg.get("prompt", ""))
        messages = msg["messages"]
        if getattr(self.encoder, "chat_template", None):
            text = self.encoder.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=False
            )
            return str(text)
        parts = [f"{m['role']}: {m['content']}\n" for m in messages]
        return "".join(parts) + "assistant:"

    def tokenize(self, rid: str, msg: dict[str, Any]) -> list[int] | None:
        """The prompt's token ids, or None when it cannot be tokenized (the gateway told)."""
        field = "messages" if "messages" in msg else "prompt"
        try:
            text = self.prompt_text(msg)
            ids = list(self.encoder(text).input_ids)
        except Exception as exc:
            # The gateway checked the text; what is left is the tokenizer's own matter,
            # for the log, not for the client.
            log.info("request %s: cannot tokenize the %s: %s", rid, field, exc)
            self.fail(rid, 400, f"{field}: cannot be tokenized", field, "invalid_prompt")
            return None
        if not ids and self.eos_id is not None:
            ids = [self.eos_id]
        return ids

    def accept(self, msg: dict[str, Any]) -> None:
        rid = str(msg["id"])
        ids = self.tokenize(rid, msg)
        if ids is None:
            return
        max_tokens = int(msg.get("max_tokens") or self.spec["max_tokens"])
        field = "messages" if "messages" in msg else "prompt"
        if len(ids) + max_tokens > self.max_context:
            if len(ids) < self.max_context:
                field = "max_tokens"
            self.fail(
                rid,
                400,
                f"This model's maximum context length is {self.max_context} tokens; the "
                f"prompt has {len(ids)} and max_tokens is {max_tokens}. Shorten the prompt "
                "or lower max_tokens.",
                field,
                "context_length_exceeded",
            )
            return
        d = self.decoding(rid, ids, max_tokens, msg)
        if d is None:
            return
        self.send({"type": "accepted", "id": rid, "prompt_tokens": len(ids)})
        with self.cond:
            if rid in self.cancelled_early:
                return
            self.by_id[rid] = d
            self.queue.append(d)
            self.cond.notify()

    def decoding(
        self, rid: str, ids: list[int], max_tokens: int, msg: dict[str, Any]
    ) -> Any | None:
        """The request's ``Decoding``, or None (a 400 sent) when its parameters cannot be
        used: the gateway checks them, and this keeps a value it let through from
        taking the thread down."""
        from acbslurm.serve.generate import Decoding, Params

        spec = self.spec
        temp = msg.get("temperature")
        top_p = msg.get("top_p")
        try:
            params = Params(
                max_tokens=max_tokens,
                temperature=float(spec["temperature"] if temp is None else temp),
                top_p=float(spec["top_p"] if top_p is None else top_p),
                seed=msg.get("seed"),
                stop=tuple(msg.get("stop") or ()),
            )
            d = Decoding(rid, ids, params, self.eos_id)
        except (TypeError, ValueError, RuntimeError) as exc:
            log.info("request %s: bad sampling parameters: %s", rid, exc)
            # the sampler's own words go to the log; the gateway's checks name the
            # fields, so only the seed can get here (torch's range)
            self.fail(rid, 400, "seed: not usable by the sampler", "seed", "invalid_value")
            return None
        if self.leader is not None:
            d.on_drop = self.leader.drop  # the followers drop their KV caches too
        return d

    # -- broker -------------------------------------------------------------------------

    # The broker client's eviction callback gets the devices to free; the weights leave
    # all of them at once.
    def on_evict(self, devices: list[str]) -> None:  # noqa: ARG002
        from acbslurm.serve.pipeline import GroupBroken

        try:
            self.gang.evict()
        except GroupBroken as exc:
            self.group_failed(str(exc))
        self.send_stats()

    def send_stats(self) -> None:
        r = self.residency
        s = r.stats
        self.send(
            {
                "type": "stats",
                "gpu_wait_seconds": self.gpu_wait,
                "turns": self.turns,
                "swaps_in": s.swaps_in,
                "swaps_out": s.swaps_out,
                "swap_in_seconds": s.swap_in_seconds,
                "swap_out_seconds": s.swap_out_seconds,
                "resident_bytes": self.gang.weights if r.resident else 0,
                "evicted_bytes": 0 if r.resident else self.gang.weights,
                "weights_bytes": self.gang.weights,
            }
        )

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

    def turn(self) -> None:
        from acbslurm.serve.pipeline import GroupBroken

        with self.cond:
            while not self.queue:
                self.cond.wait()
        lease, granted = self.acquire()
        ids = self.gang.order(lease.devices)  # rank r's part on rank r's node
        broken: GroupBroken | None = None
        try:
            with self.residency.lock:
                restore = self.gang.bring_in(ids)
                if self.device == "cuda" and self.pin is None:
                    self.pin = ids  # the weights live there from now on
                self.compute(lease, granted, restore)
        except GroupBroken as exc:
            broken = exc
        finally:
            # The worker's own view of its lease (monotonic clock, shared by the host's
            # processes): from the grant it read to the release it sent. The tests
            # check that no two models' views of one device overlap.
            released = time.monotonic()
            resident = {} if broken is not None else self.gang.resident_map(ids)
            self.client.release(lease, resident=resident)
            self.send(
                {
                    "type": "lease",
                    "devices": ids,
                    "granted": granted,
                    "released": released,
                }
            )
        if broken is not None:
            self.group_failed(str(broken))
        self.send_stats()

    def acquire(self) -> tuple[Any, float]:
        """The gang's lease and when it was granted; on a broker failure every queued
        request fails with 503 and the process exits."""
        from acbslurm.errors import BrokerError

        spec = self.spec
        hint = spec["headroom"] + (0 if self.residency.resident else self.gang.share)
        t0 = time.monotonic()
        try:
            lease = self.client.acquire(
                spec["devices"],
                memory=hint,
                pin=self.pin or self.gang.pin(self.client.devices),
                per_node=self.gang.per_node,
            )
        except BrokerError as exc:
            for d in self.take(len(self.queue)):
                self.fail(
                    d.rid,
                    503,
                    f"model {spec['name']}: GPU broker: {exc}",
                    code="broker_unavailable",
                )
            os._exit(EXIT_BROKER)
        granted = time.monotonic()
        self.gpu_wait += granted - t0
        self.turns += 1
        return lease, granted

    def compute(self, lease: Any, granted: float, restore: float) -> None:
        import torch

        dev = self.residency.torch_device
        assert dev is not None
        limit = self.spec["max_batch"]
        active = self.take(limit)
        for d in active:
            d.timing = {
                "wait_s": max(0.0, granted - d.arrived),
                "restore_s": restore,
                "started": time.monotonic(),
            }
        with torch.inference_mode():
            while active:
                for d in list(active):
                    if not self.advance(d, dev):
                        active.remove(d)
                if self.token_delay:
                    time.sleep(self.token_delay)  # simulated device time (bench knob)
                if len(active) < limit and not lease.yield_requested.is_set():
                    for d in self.take(limit - len(active)):
                        d.timing = {"wait_s": 0.0, "restore_s": 0.0, "started": time.monotonic()}
                        active.append(d)

    def advance(self, d: Any, dev: Any) -> bool:
        """One token of ``d``, sent on; False when ``d`` is over (cancelled, failed, done)."""
        if d.cancelled:
            d.drop_cache()
            self.forget(d)
            return False
        from acbslurm.serve.pipeline import GroupBroken

        try:
            delta = d.step(self.forward, dev, self.tokenizer)
        except GroupBroken:
            raise
        except Exception as exc:
            log.exception("decoding failed")
            d.drop_cache()  # the followers' caches of it too
            self.forget(d)
            self.fail(d.rid, 500, f"decoding failed: {exc}", code="internal_error")
            return False
        if delta:
            self.send({"type": "delta", "id": d.rid, "text": delta})
        if d.done:
            self.finish(d)
            return False
        return True

    def forget(self, d: Any) -> None:
        with self.cond:
            self.by_id.pop(d.rid, None)

    def finish(self, d: Any) -> None:
        self.forget(d)
        self.requests += 1
        t = d.timing
        first = (d.first_token_at - t["started"]) if d.first_token_at else 0.0
        self.send(
            {
                "type": "done",
                "id": d.rid,
                "finish_reason": d.finish_reason,
                "prompt_tokens": len(d.prompt_ids),
                "completion_tokens": len(d.out_ids),
                "timing": {"wait_s": t["wait_s"], "restore_s": t["restore_s"], "compute_s": first},
            }
        )


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
                "message": f"cannot load {w.spec['path']}: {exc}",
            }
        )
        return EXIT_REFUSED
    if store is not None:
        code = w.join_group(store)
        if code:
            return code
    return w.check_fit()


def main(argv: list[str] | None = None, cls: type[Worker] | None = None) -> int:
    """The worker process; ``cls``: an engine's worker (``engines.vllm``'s main)."""
    p = argparse.ArgumentParser(prog="acbslurm.serve.worker")
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
    spec = json.loads(args.spec)
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
    w = (cls or Worker)(spec, conn, args.broker, args.device)
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


if __name__ == "__main__":
    sys.exit(main())
