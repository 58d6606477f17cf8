"""A request's answer, made from its worker's messages (serve/protocol.py).

The gateway (serve/gateway.py) checks a request, queues it with its model's worker
(serve/supervisor.py) and hands its waiter here: the built-in engine's pieces of text
become OpenAI's answer, whole (``collect``) or as server-sent events (``stream``); a
model on vLLM has its answer relayed as vLLM wrote it (``relay``, ``whole``), with the
pool's metrics added. Each counts the request's tokens, its status and its audio.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import JSONResponse, Response

from acbslurm.serve.api import ApiError
from acbslurm.serve.metrics import Metrics
from acbslurm.serve.protocol import Accepted, Body, Delta, Done, Event
from acbslurm.serve.supervisor import Pending, WorkerHandle
from acbslurm.usagebook import Book

# A worker's message about a request, its errors raised as ApiError (``Answers.next``).
Answer = Accepted | Delta | Event | Body | Done


def _event(obj: dict[str, Any]) -> bytes:
    """One server-sent event."""
    return f"data: {json.dumps(obj)}\n\n".encode()


def _sse(name: str | None, data: str) -> bytes:
    """One server-sent event as vLLM wrote it: its name (a response's stream names
    each event) and its data."""
    head = f"event: {name}\n".encode() if name else b""
    return head + b"data: " + data.encode() + b"\n\n"


def _with_metrics(data: bytes, pool: dict[str, Any], inside: str = "") -> bytes:
    """A JSON answer (or event) with the pool's metrics in its ``metrics`` object
    (beside vLLM's own: queue, first token, generation), as ``metrics.acbslurm``;
    ``inside``: the member holding that object (a response's last event carries the
    response). Anything else comes back untouched."""
    try:
        obj = json.loads(data)
    except ValueError:
        return data
    holder = obj.get(inside) if inside and isinstance(obj, dict) else obj
    if not isinstance(holder, dict):
        return data
    metrics = holder.get("metrics")
    holder["metrics"] = {**(metrics if isinstance(metrics, dict) else {}), "acbslurm": pool}
    return json.dumps(obj).encode()


def _timing_headers(done: Done) -> dict[str, str]:
    """``x-acbslurm-wait-s`` and the like: where a request's time went."""
    timing = done["timing"].items()
    return {f"x-acbslurm-{k.replace('_', '-')}": f"{v:.6f}" for k, v in timing if v is not None}


class Answers:
    """The answers of the gateway's requests, and what they count: the status and
    tokens (``metrics``), the GPU-seconds (``book``), the audio transcribed."""

    def __init__(self, metrics: Metrics, book: Book, request_timeout: float) -> None:
        self.metrics = metrics
        self.book = book
        self.request_timeout = request_timeout
        # seconds of audio transcribed, per (key name, model): /usage, /metrics
        self.audio_seconds: dict[tuple[str, str], float] = {}

    async def next(
        self, handle: WorkerHandle, rid: str, pending: Pending, deadline: float
    ) -> Answer:
        """The request's next message; its error, or no answer by ``deadline``, raised."""
        # Once per streamed chunk: the message already there is taken at once, and the
        # wait is bounded by asyncio.timeout, not wait_for (a task of its own per call).
        left = deadline - time.monotonic()
        try:
            if left <= 0:
                raise TimeoutError
            try:
                msg = pending.queue.get_nowait()
            except asyncio.QueueEmpty:
                async with asyncio.timeout(left):
                    msg = await pending.queue.get()
        except TimeoutError:
            handle.finish(rid, cancel=True)
            raise ApiError(
                503,
                f"no answer from model {handle.spec.name} within "
                f"{self.request_timeout:g}s (busy); retry later",
                None,
                "timeout",
                "server_error",
                5,
            ) from None
        if msg["type"] == "error":
            status = msg["status"]
            kind = "invalid_request_error" if status < 500 else "server_error"
            retry = msg.get("retry_after") or (1 if status in (429, 503) else None)
            raise ApiError(status, msg["message"], msg.get("param"), msg["code"], kind, retry)
        return msg

    def stream_failed(self, handle: WorkerHandle, pending: Pending, e: ApiError) -> None:
        """A stream answered 200 and then failed: counted by the error's status too."""
        self.metrics.request(handle.spec.name, e.status, pending.key)

    @staticmethod
    def envelope(rid: str, chat: bool, model: str, chunk: bool) -> dict[str, Any]:
        obj = (
            ("chat.completion.chunk" if chunk else "chat.completion") if chat else "text_completion"
        )
        prefix = "chatcmpl" if chat else "cmpl"
        return {"id": f"{prefix}-{rid}", "object": obj, "created": int(time.time()), "model": model}

    def usage(self, handle: WorkerHandle, pending: Pending, done: Done) -> dict[str, int]:
        model, key = handle.spec.name, pending.key
        p, c = done["prompt_tokens"], done["completion_tokens"]
        self.metrics.usage(model, p, c, key)
        audio = done.get("audio_seconds", 0.0)
        if audio > 0:
            self.audio_seconds[key, model] = self.audio_seconds.get((key, model), 0.0) + audio
            self.metrics.audio(model, audio, key)
        return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}

    def pool_metrics(self, handle: WorkerHandle, pending: Pending, done: Done) -> dict[str, Any]:
        """The pool's part of a request's ``metrics``: its seconds queued at the gateway,
        waiting for its grant, restoring the model, to its first output; its
        GPU-seconds (final: its answer has ended, ``usagebook``) and the devices (GPU
        UUIDs; CPU stand-ins' ids) of the leases it had a share of."""
        handle.finish(pending.rid)  # its answer has ended (a no-op if it was finished)
        gpu_s, gpus = self.book.request_gpu_seconds(pending.rid, time.monotonic())
        out: dict[str, Any] = {"queued_s": round(pending.queued, 6)}
        out.update({k: v for k, v in done["timing"].items() if v is not None})
        out["gpu_seconds"] = gpu_s
        out["gpus"] = gpus
        return out

    # -- the built-in engine: pieces of text into OpenAI's answer -----------------------

    async def collect(
        self, handle: WorkerHandle, rid: str, pending: Pending, deadline: float, chat: bool
    ) -> Response:
        """The whole answer, once its worker is done."""
        parts: list[str] = []
        try:
            while True:
                msg = await self.next(handle, rid, pending, deadline)
                match msg["type"]:
                    case "delta":
                        parts.append(msg["text"])
                    case "done":
                        break
        finally:
            handle.finish(rid, cancel=True)
        text = "".join(parts)
        usage = self.usage(handle, pending, msg)
        out = self.envelope(rid, chat, handle.spec.name, chunk=False)
        choice: dict[str, Any] = {
            "index": 0,
            "finish_reason": msg["finish_reason"],
            "logprobs": None,
        }
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        out["choices"] = [choice]
        out["usage"] = usage
        out["metrics"] = {"acbslurm": self.pool_metrics(handle, pending, msg)}
        self.metrics.request(handle.spec.name, 200, pending.key)
        return JSONResponse(out, headers=_timing_headers(msg))

    async def stream(
        self,
        handle: WorkerHandle,
        rid: str,
        pending: Pending,
        deadline: float,
        chat: bool,
        include_usage: bool,
    ) -> AsyncIterator[bytes]:
        """The answer as server-sent events: a chat delta (the first one with the role)
        or a text piece each, then the usage (when asked for) and ``[DONE]``."""
        model = handle.spec.name

        def chunk(delta: str | None, finish: str | None, role: bool = False) -> bytes:
            out = self.envelope(rid, chat, model, chunk=True)
            if chat:
                d: dict[str, Any] = {"role": "assistant", "content": ""} if role else {}
                if delta:
                    d["content"] = delta
                choice = {"index": 0, "delta": d, "finish_reason": finish, "logprobs": None}
            else:
                text = delta or ""
                choice = {"index": 0, "text": text, "finish_reason": finish, "logprobs": None}
            out["choices"] = [choice]
            return _event(out)

        try:
            if chat:
                yield chunk(None, None, role=True)
            while True:
                try:
                    msg = await self.next(handle, rid, pending, deadline)
                except ApiError as e:  # as in relay: an error event, no [DONE]
                    self.stream_failed(handle, pending, e)
                    yield _event(e.body())
                    return
                match msg["type"]:
                    case "delta":
                        yield chunk(msg["text"], None)
                    case "done":
                        yield chunk(None, msg["finish_reason"])
                        usage = self.usage(handle, pending, msg)
                        if include_usage:
                            tail = self.envelope(rid, chat, model, chunk=True)
                            tail["choices"] = []
                            tail["usage"] = usage
                            tail["metrics"] = {"acbslurm": self.pool_metrics(handle, pending, msg)}
                            yield _event(tail)
                        break
            yield b"data: [DONE]\n\n"
        finally:
            # Also on a client that went away mid-stream: the worker stops decoding it.
            with contextlib.suppress(Exception):
                handle.finish(rid, cancel=True)

    # -- engine: vllm: vLLM's answer back whole ------------------------------------------

    async def relay(
        self, handle: WorkerHandle, rid: str, pending: Pending, deadline: float
    ) -> AsyncIterator[bytes]:
        """vLLM's server-sent events as it sent them, then ``[DONE]``; a stream that
        fails (its server died or hung, the timeout) ends with an error event in
        OpenAI's shape and no ``[DONE]``: the ``openai`` client raises on it, and no
        client takes the cut answer for a whole one."""
        marker = True
        try:
            while True:
                try:
                    msg = await self.next(handle, rid, pending, deadline)
                except ApiError as e:
                    self.stream_failed(handle, pending, e)
                    yield _event(e.body())
                    return
                match msg["type"]:
                    case "event":
                        yield _sse(msg.get("event"), msg["data"])
                    case "done":
                        self.usage(handle, pending, msg)
                        if "tail" in msg:
                            # The last event with its usage (vLLM's metrics too), the pool's
                            # metrics added (a response's: ``response.metrics.acbslurm``).
                            name = msg.get("tail_event", "")
                            inside = "response" if name.startswith("response.") else ""
                            pool = self.pool_metrics(handle, pending, msg)
                            data = _with_metrics(msg["tail"].encode(), pool, inside)
                            yield _sse(name, data.decode())
                        marker = msg.get("sse_done", True) is not False
                        break
            if marker:  # a response's stream ends with its last event, as vLLM's does
                yield b"data: [DONE]\n\n"
        finally:
            with contextlib.suppress(Exception):
                handle.finish(rid, cancel=True)

    async def whole(
        self,
        handle: WorkerHandle,
        rid: str,
        pending: Pending,
        deadline: float,
        metrics: bool = True,
    ) -> Response:
        """vLLM's whole JSON answer, with the request's timing headers."""
        data = b"{}"
        kind = "application/json"
        try:
            while True:
                msg = await self.next(handle, rid, pending, deadline)
                match msg["type"]:
                    case "body":
                        data = msg["data"].encode()
                        kind = msg.get("content_type") or kind
                    case "done":
                        break
        finally:
            handle.finish(rid, cancel=True)
        self.usage(handle, pending, msg)
        if metrics and "json" in kind:
            data = _with_metrics(data, self.pool_metrics(handle, pending, msg))
        self.metrics.request(handle.spec.name, 200, pending.key)
        return Response(data, media_type=kind, headers=_timing_headers(msg))
