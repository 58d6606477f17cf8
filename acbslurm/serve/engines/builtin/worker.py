"""The built-in engine's worker: ``python -m acbslurm.serve.engines.builtin.worker``.

The project's own decode loop, the reference engine and the one for CPU stand-ins.
It loads the model once into host memory; each turn acquires the gang (memory hint:
what is not resident yet plus headroom), restores the weights if they were evicted
(``gang``, ``residency``), decodes every queued request in round robin (up to
``max_batch``, admitting newcomers while the lease is not asked to yield:
``decoding``), and releases with the weights' share as resident bytes. When the broker
asks for the memory, the weights go to host memory in place.

With ``procs: N`` this process is the leader (rank 0) of a worker group: it runs the
first pipeline stage, holds the one gang lease for all the group's devices, and
commands the followers (``follower``, ``group``) to restore, compute and evict their
stages; a group whose follower fails exits (EXIT_GROUP) and is restarted.

What every worker does alike (the gateway's socket, the request intake, the broker's
registration, the process's main loop) is ``serve.worker.Worker``'s.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any, NoReturn

from acbslurm.errors import BrokerError
from acbslurm.serve import worker
from acbslurm.serve.engines.builtin.gang import Gang
from acbslurm.serve.modelproc import load_causal_lm
from acbslurm.serve.placement import from_env, large_enough
from acbslurm.serve.protocol import Generate, Ready
from acbslurm.serve.routes import BUILTIN, served
from acbslurm.serve.worker import EXIT_BROKER, EXIT_GROUP, EXIT_REFUSED, Worker, longest_token

# transformers and the modules that import torch (decoding, residency, stages, group)
# are imported in the methods that use them: after the broker registration
# (Worker.register), so that a worker without a broker fails before importing torch,
# and after prepare_model_process has set the environment they read at import.

log = logging.getLogger("acbslurm.serve.engines.builtin.worker")


class BuiltinWorker(Worker):
    """A worker whose model runs in the project's own decode loop (``engine: builtin``)."""

    # -- start --------------------------------------------------------------------------

    def ready_message(self) -> Ready:
        return {
            "type": "ready",
            "weights_bytes": self.gang.weights,
            "max_context": self.max_context,
            "max_prompt_chars": self.max_prompt_chars,
            "routes": served(self.spec.routes, BUILTIN),
        }

    def load(self) -> None:
        from transformers import AutoTokenizer

        from acbslurm.serve.engines.builtin.decoding import local_forward
        from acbslurm.serve.engines.builtin.residency import Residency

        self.tokenizer = AutoTokenizer.from_pretrained(self.spec.path)
        # The tokenizing thread's own copy: a fast tokenizer is one Rust object, and
        # the decoding loop's detokenizing must not share it with a concurrent encode.
        self.encoder = AutoTokenizer.from_pretrained(self.spec.path)
        model, self.dtype = load_causal_lm(self.spec)
        cfg = model.config
        own = getattr(cfg, "max_position_embeddings", 0) or getattr(cfg, "n_positions", 0) or 2048
        self.max_context = min(self.spec.max_context or own, own)
        self.eos_id = self.tokenizer.eos_token_id
        self.max_prompt_chars = self.max_context * longest_token(self.tokenizer)
        self.vocab = int(model.get_output_embeddings().weight.shape[0])
        if self.procs > 1:
            from acbslurm.serve.engines.builtin.stages import make_stage

            self.stage = make_stage(model, 0, self.procs)
        self.model = model
        self.residency = Residency(model, self.device)
        self.turn_lock = self.residency.lock  # an eviction waits for the turn's compute
        self.forward = local_forward(model)
        self.gang = Gang(self.residency, self.spec.devices, self.procs, self.device)

    # -- the worker group (procs > 1) ----------------------------------------------------

    def open_group(self, host: str) -> Any:
        """Host the group's rendezvous and tell the gateway where, so it starts the
        followers (while this process loads its own stage)."""
        from acbslurm.serve.engines.builtin import group as pipeline

        store = pipeline.rendezvous(host, 0, 0, self.procs)
        self.send({"type": "rendezvous", "address": f"{host}:{store.port}"})
        return store

    def join_group(self, store: Any) -> int:
        """0 when every follower loaded its stage, else EXIT_REFUSED (gateway told)."""
        from acbslurm.serve.engines.builtin import group as pipeline

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

    def group_failed(self, reason: str) -> NoReturn:
        """A follower died or hung: its requests fail (503 from the gateway), the
        process exits so that the broker frees the lease and the gateway restarts
        the whole group."""
        log.error("model %s: worker group failed: %s", self.spec.name, reason)
        self.send({"type": "group_failed", "message": reason})
        os._exit(EXIT_GROUP)

    def check_fit(self) -> int:
        """0 when the gang fits the broker's devices, else EXIT_REFUSED (gateway told)."""
        count = self.spec.devices
        need = self.gang.share + self.spec.headroom
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
                        f"model {self.spec.name} needs {count} device(s) with "
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

    def prompt_text(self, msg: Generate) -> str:
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

    def tokenize(self, rid: str, msg: Generate) -> list[int] | None:
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

    def accept(self, msg: Generate) -> None:
        rid = msg["id"]
        ids = self.tokenize(rid, msg)
        if ids is None:
            return
        max_tokens = int(msg.get("max_tokens") or self.spec.max_tokens)
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
        self.enqueue(rid, d)

    def decoding(self, rid: str, ids: list[int], max_tokens: int, msg: Generate) -> Any | None:
        """The request's ``Decoding``, or None (a 400 sent) when its parameters cannot be
        used: the gateway checks them, and this keeps a value it let through from
        taking the thread down."""
        from acbslurm.serve.engines.builtin.decoding import Decoding, Params

        spec = self.spec
        temp = msg.get("temperature")
        top_p = msg.get("top_p")
        try:
            params = Params(
                max_tokens=max_tokens,
                temperature=float(spec.temperature if temp is None else temp),
                top_p=float(spec.top_p if top_p is None else top_p),
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
        from acbslurm.serve.engines.builtin.group import GroupBroken

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

    # -- a turn (serve.worker.Worker.turn drives these) ---------------------------------

    def turn_devices(self, lease: Any) -> list[str]:
        return self.gang.order(lease.devices)  # rank r's part on rank r's node

    def bring_in(self, devices: list[str]) -> float:
        """The weights restored onto the gang's devices where they were evicted."""
        restore = self.gang.bring_in(devices)
        if self.device == "cuda" and self.pin is None:
            self.pin = devices  # the weights live there from now on
        return restore

    def resident(self, devices: list[str]) -> dict[str, int]:
        return self.gang.resident_map(devices)

    def broken(self, reason: str) -> NoReturn:
        self.group_failed(reason)

    def acquire(self) -> tuple[Any, float]:
        """The gang's lease and when it was granted; on a broker failure every queued
        request fails with 503 and the process exits."""
        spec = self.spec
        hint = spec.headroom + (0 if self.residency.resident else self.gang.share)
        t0 = time.monotonic()
        try:
            lease = self.client.acquire(
                spec.devices,
                memory=hint,
                pin=self.pin or self.gang.pin(self.client.devices),
                per_node=self.gang.per_node,
            )
        except BrokerError as exc:
            for d in self.take(len(self.queue)):
                self.fail(
                    d.rid,
                    503,
                    f"model {spec.name}: GPU broker: {exc}",
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
        limit = self.spec.max_batch
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
        from acbslurm.serve.engines.builtin.group import GroupBroken

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


def main(argv: list[str] | None = None) -> int:
    """The worker of an ``engine: builtin`` model."""
    return worker.main(argv, BuiltinWorker)


if __name__ == "__main__":
    sys.exit(main())
