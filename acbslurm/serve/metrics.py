"""``GET /metrics``: Prometheus text, per model.

Counted by the gateway, per key name (who is billed; ``-``: no key, an open pool or a
refused request): requests (by HTTP status), prompt and completion tokens.
Read from the workers' last report at scrape time (counters keep the totals of a
restarted worker's earlier lives): queue length, seconds waiting for GPUs, swaps in
and out and their seconds, resident and evicted bytes, worker restarts, hangs, and the state
each worker is in (a model that cannot serve now reads ``worker_up 0`` and its state,
e.g. ``restarting``).
GPU-seconds (``usagebook``): those each model's leases held, and each key name's share
of them (``-`` for leases with no request in hand).

Who sees what (``render``): the pool's owner (and anyone in an open pool) every row; any
other key the rows of its own name only, and not the leased GPU-seconds (what the other
names used would be that less its own), as ``/usage`` answers. The models' own gauges
(queue, worker states, swaps) carry no key and are shown to every key, as ``/health`` is.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from acbslurm.serve.supervisor import WorkerHandle
from acbslurm.usagebook import Book

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _Workers(Collector):
    def __init__(self, handles: Sequence[WorkerHandle]) -> None:
        self.handles = handles

    def collect(self) -> Iterator[Any]:
        def fam(kind: Any, name: str, doc: str) -> Any:
            return kind(name, doc, labels=["model"])

        queue = fam(
            GaugeMetricFamily, "acbslurm_serve_queue_length", "Requests accepted and not finished"
        )
        up = fam(
            GaugeMetricFamily, "acbslurm_serve_worker_up", "1 when the model's worker is ready"
        )
        wait = fam(
            CounterMetricFamily,
            "acbslurm_serve_gpu_wait_seconds",
            "Seconds spent waiting for a GPU grant",
        )
        turns = fam(
            CounterMetricFamily, "acbslurm_serve_turns", "GPU leases taken (one batch each)"
        )
        sin = fam(CounterMetricFamily, "acbslurm_serve_swaps_in", "Restores of evicted weights")
        sout = fam(
            CounterMetricFamily, "acbslurm_serve_swaps_out", "Evictions of weights to host memory"
        )
        sin_s = fam(
            CounterMetricFamily, "acbslurm_serve_swap_in_seconds", "Seconds spent restoring weights"
        )
        sout_s = fam(
            CounterMetricFamily, "acbslurm_serve_swap_out_seconds", "Seconds spent evicting weights"
        )
        res = fam(GaugeMetricFamily, "acbslurm_serve_resident_bytes", "Weight bytes on the devices")
        ev = fam(
            GaugeMetricFamily, "acbslurm_serve_evicted_bytes", "Weight bytes evicted to host memory"
        )
        residue = fam(
            GaugeMetricFamily,
            "acbslurm_serve_sleep_residue_bytes",
            "engine vllm: bytes its server still held on a GPU after its last sleep (NVML)",
        )
        rst = fam(CounterMetricFamily, "acbslurm_serve_worker_restarts", "Worker restarts")
        hangs = fam(
            CounterMetricFamily,
            "acbslurm_serve_hangs",
            "Times the model was declared hung (no progress for hang_timeout) and restarted",
        )
        state = GaugeMetricFamily(
            "acbslurm_serve_worker_state",
            "1 for the state the model's worker is in (starting, ready, restarting, refused)",
            labels=["model", "state"],
        )
        for h in self.handles:
            m = [h.spec.name]
            state.add_metric([h.spec.name, h.state], 1.0)
            queue.add_metric(m, h.queue_length)
            up.add_metric(m, 1.0 if h.state == "ready" else 0.0)
            wait.add_metric(m, h.counter("gpu_wait_seconds"))
            turns.add_metric(m, h.counter("turns"))
            sin.add_metric(m, h.counter("swaps_in"))
            sout.add_metric(m, h.counter("swaps_out"))
            sin_s.add_metric(m, h.counter("swap_in_seconds"))
            sout_s.add_metric(m, h.counter("swap_out_seconds"))
            res.add_metric(m, float(h.stats.get("resident_bytes", 0)))
            ev.add_metric(m, float(h.stats.get("evicted_bytes", 0)))
            residue.add_metric(m, float(h.stats.get("sleep_residue_bytes", 0)))
            rst.add_metric(m, h.restarts)
            hangs.add_metric(m, h.hangs)
        yield from (queue, up, wait, turns, sin, sout, sin_s, sout_s, res, ev, residue, rst)
        yield from (hangs, state)


class _Usage(Collector):
    def __init__(self, book: Book) -> None:
        self.book = book

    def collect(self) -> Iterator[Any]:
        leased = CounterMetricFamily(
            "acbslurm_serve_leased_gpu_seconds",
            "Device-seconds of the model's leases (grant to release, as its worker saw them)",
            labels=["model"],
        )
        billed = CounterMetricFamily(
            "acbslurm_serve_gpu_seconds",
            "The leases' device-seconds shared among the requests in hand, by key name",
            labels=["key", "model"],
        )
        totals = self.book.totals
        for model, seconds in sorted(totals.leased.items()):
            leased.add_metric([model], seconds)
        for (name, model), row in sorted(totals.use.items()):
            billed.add_metric([name, model], row[3])
        yield from (leased, billed)


class Metrics:
    def __init__(self, handles: Sequence[WorkerHandle], book: Book | None = None) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "acbslurm_serve_requests",
            "HTTP requests by key name, model and status",
            ["key", "model", "status"],
            registry=self.registry,
        )
        self.tokens = Counter(
            "acbslurm_serve_tokens",
            "Tokens by key name, model and kind (prompt, completion)",
            ["key", "model", "kind"],
            registry=self.registry,
        )
        self.audio_seconds = Counter(
            "acbslurm_serve_audio_seconds",
            "Seconds of audio transcribed (/v1/audio/transcriptions) by key name and model",
            ["key", "model"],
            registry=self.registry,
        )
        self.registry.register(_Workers(handles))
        if book is not None:
            self.registry.register(_Usage(book))

    def request(self, model: str, status: int, key: str) -> None:
        self.requests.labels(key, model, str(status)).inc()

    def usage(self, model: str, prompt: int, completion: int, key: str) -> None:
        self.tokens.labels(key, model, "prompt").inc(prompt)
        self.tokens.labels(key, model, "completion").inc(completion)

    def audio(self, model: str, seconds: float, key: str) -> None:
        self.audio_seconds.labels(key, model).inc(seconds)

    def render(self, only: str | None = None) -> bytes:
        """The exposition: every row, or with ``only`` the rows of that key name alone."""
        if only is None:
            return bytes(generate_latest(self.registry))
        return bytes(generate_latest(_OwnRows(self.registry, only)))


# The families that add up every key name's use: not shown to a key that sees its own.
_EVERYONES = ("acbslurm_serve_leased_gpu_seconds",)


class _OwnRows:
    """The registry's families as one key name sees them: samples labelled with another
    ``key`` left out, the all-names families left out."""

    def __init__(self, registry: CollectorRegistry, name: str) -> None:
        self.registry = registry
        self.name = name

    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            if family.name in _EVERYONES:
                continue
            kept = Metric(family.name, family.documentation, family.type, family.unit)
            kept.samples = [
                s for s in family.samples if s.labels.get("key", self.name) == self.name
            ]
            yield kept
