"""A model's worker group: the leader (rank 0) and its followers over ``torch.distributed``.

Only the leader talks to the gateway and the broker. It holds the gang lease for all
the group's devices; the followers act on its commands only, so none of them touches
a device outside the leader's lease:

- ``RESTORE`` (the devices of each rank): each restores its shard of the weights;
- ``STEP`` (request key, tokens): the hidden states go down the stages, each keeping
  its own KV cache for the request; the last stage sends the logits back to rank 0;
- ``DROP`` (request key): forget the request's KV cache;
- ``EVICT``: each moves its shard to host memory in place;
- ``STOP``: exit.

Every command starts with a broadcast of a small int64 header from rank 0; RESTORE
and EVICT end with an all-gather of each rank's (seconds, bytes), so the leader
returns from them only when every shard has moved. Tensors travel as bytes
(``view(uint8)``), whatever their dtype.

Transport: one gloo group (TCP) carries everything on the CPU stand-ins. On GPUs the
commands stay on that gloo group (CPU tensors: a follower waiting for its next
command holds nothing on a device), and the hidden states and logits would go over
an NCCL group created at the first grant (``data_backend``); docs/serve.md.

Failures never hang: a peer that dies closes its connections and the others' calls
raise at once; a peer that hangs is caught by the leader's watchdog (``timeout``),
which fails the group (the gateway then restarts it).
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import TCPStore  # type: ignore[attr-defined]

from acbslurm.broker.runtime import _cuda_ordinal
from acbslurm.config import env_float
from acbslurm.serve.errors import TurnBroken
from acbslurm.values import mutable

log = logging.getLogger("acbslurm.serve.engines.builtin.group")

NOOP, RESTORE, STEP, DROP, EVICT, STOP = range(6)
HEADER = 4  # int64: command, key, tokens, dtype of the hidden states
# The hidden states travel in their own dtype (the header says which); logits always
# in float32, which holds any model's exactly, so the leader picks from the same values.
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
FOREVER = datetime.timedelta(days=365)  # followers wait for commands as long as it takes
JOIN_TIMEOUT = datetime.timedelta(seconds=300)


class GroupBroken(TurnBroken):
    """A peer of the group died or failed: the group must be restarted."""


def stage_timeout() -> float:
    """Seconds one command may take before the leader declares the group broken."""
    return env_float("ACBSLURM_SERVE_STAGE_TIMEOUT", 120.0, minimum=0.001)


def rendezvous(host: str, port: int, rank: int, procs: int) -> TCPStore:
    """The leader hosts the store (``port`` 0: any free one); followers join it."""
    if rank == 0:
        return TCPStore(host, port, procs, is_master=True, wait_for_workers=False)
    return TCPStore(host, port, procs, is_master=False, timeout=JOIN_TIMEOUT)


def join(store: TCPStore, rank: int, procs: int) -> None:
    """Form the gloo group; the leader first waits (bounded) for every follower."""
    if rank == 0:
        store.wait([f"joined/{r}" for r in range(1, procs)], JOIN_TIMEOUT)
    else:
        store.set(f"joined/{rank}", "1")
    dist.init_process_group("gloo", store=store, rank=rank, world_size=procs, timeout=FOREVER)


def send(t: torch.Tensor, dst: int) -> None:
    dist.send(t.contiguous().view(torch.uint8), dst)


def recv(shape: tuple[int, ...], dtype: torch.dtype, src: int) -> torch.Tensor:
    buf = torch.empty(shape, dtype=dtype)
    dist.recv(buf.view(torch.uint8), src)
    return buf


def header(cmd: int = NOOP, key: int = 0, tokens: int = 0, dtype: int = 0) -> torch.Tensor:
    h = torch.tensor([cmd, key, tokens, dtype], dtype=torch.int64)
    dist.broadcast(h, 0)
    return h


def report(seconds: float, nbytes: int, procs: int) -> list[tuple[float, int]]:
    """Every rank's (seconds, bytes) of the command just done, on every rank."""
    mine = torch.tensor([seconds, float(nbytes)], dtype=torch.float64)
    out = [torch.empty(2, dtype=torch.float64) for _ in range(procs)]
    dist.all_gather(out, mine)
    return [(float(t[0]), int(t[1])) for t in out]


@mutable
class Peer:
    """What a follower told the leader at start."""

    ok: bool
    message: str
    weights: int


def exchange(info: Peer, procs: int) -> list[Peer]:
    got: list[Any] = [None] * procs
    dist.all_gather_object(got, info)
    return [g for g in got]


class Watchdog:
    """Fails the group when one command runs longer than ``timeout`` seconds."""

    def __init__(self, timeout: float, on_timeout: Callable[[str], None]) -> None:
        self.timeout = timeout
        self.on_timeout = on_timeout
        self.since = 0.0
        self.what = ""
        threading.Thread(target=self._watch, name="stage-watchdog", daemon=True).start()

    def arm(self, what: str) -> None:
        self.what, self.since = what, time.monotonic()

    def disarm(self) -> None:
        self.since = 0.0

    def _watch(self) -> None:
        while True:
            time.sleep(min(1.0, self.timeout / 4))
            since = self.since
            if since and time.monotonic() - since > self.timeout:
                self.on_timeout(f"{self.what} took over {self.timeout:g}s")
                return


@mutable
class PipePast:
    key: int  # the followers' name for this request's KV caches
    local: Any  # the leader's own stage cache


class Leader:
    """Rank 0's side: the commands above, and ``forward`` for ``generate.Decoding``."""

    def __init__(self, stage: Any, procs: int, vocab: int, dog: Watchdog):
        self.stage = stage
        self.procs = procs
        self.vocab = vocab
        self.dog = dog
        self._keys = itertools.count(1)

    @contextlib.contextmanager
    def _command(
        self, what: str, cmd: int, key: int = 0, tokens: int = 0, dtype: int = 0
    ) -> Iterator[None]:
        """Send a command and do its part, under the watchdog; a peer's failure raises
        ``GroupBroken``."""
        self.dog.arm(what)
        try:
            header(cmd, key, tokens, dtype)
            yield
        except RuntimeError as exc:  # gloo: a peer closed its connection
            raise GroupBroken(f"{what}: {exc}") from exc
        finally:
            self.dog.disarm()

    def __call__(self, ids: torch.Tensor, past: PipePast | None) -> tuple[torch.Tensor, Any]:
        key = past.key if past is not None else next(self._keys)
        hidden, local = self.stage.forward(ids, past.local if past is not None else None)
        code = DTYPES.index(hidden.dtype)
        with self._command("a decoding step", STEP, key, ids.shape[1], code):
            send(hidden.to("cpu"), 1)
            logits = recv((self.vocab,), torch.float32, self.procs - 1)
        return logits, PipePast(key, local)

    def drop(self, past: Any) -> None:
        if isinstance(past, PipePast):
            with self._command("dropping a KV cache", DROP, past.key):
                pass

    def restore(
        self, chunks: list[list[str]], own: Callable[[], tuple[float, int]]
    ) -> list[tuple[float, int]]:
        """Every rank restores its shard (the leader's own by ``own()``, meanwhile)."""
        with self._command("restoring the weights", RESTORE):
            dist.broadcast_object_list([chunks], 0)
            return report(*own(), self.procs)

    def evict(self, own: Callable[[], tuple[float, int]]) -> list[tuple[float, int]]:
        with self._command("evicting the weights", EVICT):
            return report(*own(), self.procs)

    def stop(self) -> None:
        with contextlib.suppress(RuntimeError):
            header(STOP)


class Follower:
    """Ranks 1..N-1: wait for the leader's commands and do them; returns on STOP."""

    def __init__(self, stage: Any, residency: Any, device: str) -> None:
        self.stage = stage
        self.residency = residency
        self.device = device
        self.caches: dict[int, Any] = {}
        self.dtype = torch.float32  # of the hidden states, from each command's header

    def serve(self) -> None:
        handlers: dict[int, Callable[[int, int], None]] = {
            NOOP: lambda _k, _t: None,
            RESTORE: self._restore,
            STEP: self._step,
            DROP: self._drop,
            EVICT: self._evict,
        }
        while True:
            h = header()
            cmd = int(h[0])
            if cmd == STOP:
                return
            self.dtype = DTYPES[int(h[3])]
            handlers[cmd](int(h[1]), int(h[2]))

    def _restore(self, _key: int, _tokens: int) -> None:
        box: list[Any] = [None]
        dist.broadcast_object_list(box, 0)
        mine = box[0][self.stage.rank]
        ordinal = 0  # a CPU stand-in's
        if self.device == "cuda":
            ordinal = _cuda_ordinal(mine[0])
        seconds = self.residency.ensure_on_device(ordinal)
        report(seconds, self.residency.resident_bytes, self.stage.procs)

    def _drop(self, key: int, _tokens: int) -> None:
        self.caches.pop(key, None)

    def _evict(self, _key: int, _tokens: int) -> None:
        self.caches.clear()  # KV caches are simply freed with the weights
        seconds = self.residency.evict()
        report(seconds, self.residency.host_bytes, self.stage.procs)

    def _step(self, key: int, tokens: int) -> None:
        stage = self.stage
        dev = self.residency.torch_device
        hidden = recv((1, tokens, stage.hidden), self.dtype, stage.rank - 1)
        with torch.inference_mode():
            out, self.caches[key] = stage.forward(hidden.to(dev), self.caches.get(key))
        if stage.last:
            send(out.to("cpu", torch.float32), 0)
        else:
            send(out.to("cpu", self.dtype), stage.rank + 1)
