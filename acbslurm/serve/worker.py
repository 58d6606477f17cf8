"""One model's long-lived worker process: ``python -m acbslurm.serve.worker``.

It loads the model once, registers with the broker and serves the gateway on one
unix socket. Requests queue while the model waits for its gang; each turn acquires
the gang (memory hint: what is not resident yet plus headroom), restores the
weights if they were evicted, decodes every queued request (up to ``max_batch``,
admitting newcomers while the lease is not asked to yield), and releases with the
weights' share as resident bytes. When the broker asks for the memory, the weights
go to host memory in place (``residency``). The worker exits when the gateway's
connection closes or the broker goes away (the gateway then restarts it).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import sys
import threading
import time
import warnings
from collections import deque
from typing import Any

from acbslurm.serve.protocol import MAX_LINE, decode, encode

log = logging.getLogger("acbslurm.serve.worker")

EXIT_REFUSED = 3  # the model cannot run here (gang or memory cannot fit): no restart
EXIT_BROKER = 4  # the broker went away


class Worker:
    def __init__(self, spec: dict[str, Any], conn: socket.socket, broker: str, device: str) -> None:
        self.spec = spec
        self.conn = conn
        self.broker_address = broker
        self.device = device
        self.wlock = threading.Lock()
        self.cond = threading.Condition()
        self.queue: deque[Any] = deque()
        self.by_id: dict[str, Any] = {}
        self.token_delay = float(os.environ.get("ACBSLURM_SERVE_TOKEN_DELAY", "0") or 0)
        self.gpu_wait = 0.0
        self.turns = 0
        self.requests = 0
        self.pin: list[str] | None = None

    # -- I/O ----------------------------------------------------------------------------

    def send(self, msg: dict[str, Any]) -> None:
        data = encode(msg)
        with self.wlock:
            try:
                self.conn.sendall(data)
            except OSError:
                os._exit(0)  # the gateway is gone: nothing left to serve

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

    def load(self) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from acbslurm.serve.residency import Residency

        torch.set_num_threads(int(os.environ.get("ACBSLURM_SERVE_THREADS", "1")))
        dtype = getattr(torch, self.spec["dtype"])
        self.tokenizer = AutoTokenizer.from_pretrained(self.spec["path"])
        self.model = AutoModelForCausalLM.from_pretrained(self.spec["path"], dtype=dtype)
        self.model.eval()
        cfg = self.model.config
        own = getattr(cfg, "max_position_embeddings", 0) or getattr(cfg, "n_positions", 0) or 2048
        self.max_context = min(self.spec["max_context"] or own, own)
        self.eos_id = self.tokenizer.eos_token_id
        self.residency = Residency(self.model, self.device)
        count = self.spec["devices"]
        # Bytes per device of the gang. On the CPU stand-ins the weights count as split
        # evenly over the gang (a simulated sharded model). On CUDA the whole model sits
        # on the lease's first GPU (no tensor parallelism yet), so that GPU needs all of it.
        if self.device == "cuda":
            self.share = self.residency.weights
        else:
            self.share = -(-self.residency.weights // count)

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
        count = self.spec["devices"]
        need = self.share + self.spec["headroom"]
        devs = self.client.devices
        fitting = [d for d in devs if d.memory_total == 0 or d.memory_total >= need]
        if len(fitting) < count:
            self.send(
                {
                    "type": "fatal",
                    "exit": EXIT_REFUSED,
                    "message": (
                        f"model {self.spec['name']} needs {count} device(s) with "
                        f"{need / 2**20:.1f} MiB each (weights "
                        f"{self.residency.weights / 2**20:.1f} MiB / {count} + headroom); "
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
                os._exit(0)  # the gateway closed us
            try:
                msg = decode(line)
            except ValueError:
                continue
            if msg.get("type") == "generate":
                self.accept(msg)
            elif msg.get("type") == "cancel":
                with self.cond:
                    d = self.by_id.get(str(msg.get("id")))
                    if d is not None:
                        d.cancelled = True
                        if d in self.queue:  # not started: no turn needed for it
                            self.queue.remove(d)
                            self.by_id.pop(d.rid, None)

    def prompt_text(self, msg: dict[str, Any]) -> str:
        if "messages" not in msg:
            return str(msg.get("prompt", ""))
        messages = msg["messages"]
        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=False
            )
            return str(text)
        parts = [f"{m['role']}: {m['content']}\n" for m in messages]
        return "".join(parts) + "assistant:"

    def accept(self, msg: dict[str, Any]) -> None:
        from acbslurm.serve.generate import Decoding, Params

        rid = str(msg["id"])
        spec = self.spec
        try:
            ids = list(self.tokenizer(self.prompt_text(msg)).input_ids)
        except Exception as exc:
            self.fail(rid, 400, f"cannot tokenize the prompt: {exc}", "prompt")
            return
        if not ids and self.eos_id is not None:
            ids = [self.eos_id]
        max_tokens = int(msg.get("max_tokens") or spec["max_tokens"])
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
        temp = msg.get("temperature")
        top_p = msg.get("top_p")
        params = Params(
            max_tokens=max_tokens,
            temperature=float(spec["temperature"] if temp is None else temp),
            top_p=float(spec["top_p"] if top_p is None else top_p),
            seed=msg.get("seed"),
            stop=tuple(msg.get("stop") or ()),
        )
        d = Decoding(rid, ids, params, self.eos_id)
        self.send({"type": "accepted", "id": rid, "prompt_tokens": len(ids)})
        with self.cond:
            self.by_id[rid] = d
            self.queue.append(d)
            self.cond.notify()

    # -- broker -------------------------------------------------------------------------

    # The broker client's eviction callback gets the devices to free; the weights leave
    # all of them at once.
    def on_evict(self, devices: list[str]) -> None:  # noqa: ARG002
        self.residency.evict()
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
                "resident_bytes": r.resident_bytes,
                "evicted_bytes": r.host_bytes,
                "weights_bytes": r.weights,
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
        from acbslurm.errors import BrokerError

        with self.cond:
            while not self.queue:
                self.cond.wait()
        spec = self.spec
        hint = spec["headroom"] + (0 if self.residency.resident else self.share)
        t0 = time.monotonic()
        try:
            lease = self.client.acquire(spec["devices"], memory=hint, pin=self.pin)
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
        try:
            with self.residency.lock:
                restore = self.residency.ensure_on_device(self.ordinal(lease))
                if self.device == "cuda" and self.pin is None:
                    self.pin = lease.device_ids  # the weights live there from now on
                self.compute(lease, granted, restore)
        finally:
            # The worker's own view of its lease (monotonic clock, shared by the host's
            # processes): from the grant it read to the release it sent. The tests
            # check that no two models' views of one device overlap.
            released = time.monotonic()
            self.client.release(lease, resident=self.resident_map(lease))
            self.send(
                {
                    "type": "lease",
                    "devices": lease.device_ids,
                    "granted": granted,
                    "released": released,
                }
            )
        self.send_stats()

    def resident_map(self, lease: Any) -> dict[str, int]:
        """What stays on each device of the lease after release."""
        if self.device == "cuda":
            return {lease.device_ids[0]: self.share}
        return dict.fromkeys(lease.device_ids, self.share)

    def ordinal(self, lease: Any) -> int:
        """The CUDA ordinal of the lease's first GPU (matched by UUID, as agarun does)."""
        if self.device != "cuda":
            return 0
        from acbslurm.broker.runtime import _cuda_ordinal

        return _cuda_ordinal(lease.devices[0].id)

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
        try:
            delta = d.step(self.model, dev, self.tokenizer)
        except Exception as exc:
            log.exception("decoding failed")
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="acbslurm.serve.worker")
    p.add_argument("--spec", required=True, help="the model's spec as JSON")
    p.add_argument("--socket", required=True)
    p.add_argument("--broker", required=True)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never download anything
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    # transformers 5 renames past_key_values; the old name works for every architecture.
    warnings.filterwarnings("ignore", category=FutureWarning)
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
    conn.settimeout(None)
    w = Worker(spec, conn, args.broker, args.device)
    code = w.register()
    if code:
        return code
    try:
        w.load()
    except Exception as exc:
        w.send(
            {"type": "fatal", "exit": EXIT_REFUSED, "message": f"cannot load {spec['path']}: {exc}"}
        )
        return EXIT_REFUSED
    code = w.check_fit()
    if code:
        return code
    w.send({"type": "ready", "weights_bytes": w.residency.weights, "max_context": w.max_context})
    w.send_stats()
    threading.Thread(target=w.reader, name="gateway-reader", daemon=True).start()
    while True:
        w.turn()


if __name__ == "__main__":
    sys.exit(main())
