"""HTTP to one vLLM server on its unix socket (``acbslurm.unixhttp``): its health, its
admin routes (``/sleep``, ``/wake_up``, ``/collective_rpc``), its routes and token
counters, and the client's requests forwarded whole, the answers passed back as vLLM
wrote them: each streamed chunk, or the whole body, or vLLM's refusal (``VllmError``:
its status, message and param).
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Callable, Iterator
from typing import Any

from acbslurm import unixhttp
from acbslurm.serve.routes import from_openapi

CONNECT_TIMEOUT = 10.0  # s: a server that does not take a connection on its socket is stuck
# The counters whose growth is progress (the gateway's heartbeat): tokens prefilled and
# decoded, summed over the server's label sets.
PROGRESS_COUNTERS = (b"vllm:generation_tokens_total", b"vllm:prompt_tokens_total")
# The events that end a stream of /v1/responses (which sends no [DONE])
LAST_EVENTS = ("response.completed", "response.incomplete", "response.failed", "error")


class VllmError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, code: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code


class ServerApi:
    """The server's HTTP routes, one connection per request (a cancel shuts one down)."""

    def __init__(self, uds: str) -> None:
        self.uds = uds

    def call(
        self, method: str, path: str, body: Any = None, timeout: float = 600
    ) -> tuple[int, bytes]:
        sock = unixhttp.connect(self.uds, timeout)
        try:
            data = None if body is None else json.dumps(body).encode()
            headers = {"Content-Type": "application/json"} if data is not None else {}
            sock.sendall(unixhttp.request(method, path, data, headers))
            answer = unixhttp.Answer(sock)
            data = answer.read()
            if answer.cut:
                raise unixhttp.BadAnswer(f"vLLM's answer to {path} ended before its end")
            return answer.status, data
        finally:
            sock.close()

    def _admin(self, path: str, body: Any = None, timeout: float = 600) -> None:
        status, data = self.call("POST", path, body, timeout=timeout)
        if status != 200:
            raise VllmError(503, f"vLLM {path}: {status} {data[:200]!r}")

    def wake(self, level: int = 1) -> None:
        """``/wake_up``; after a level-2 sleep (weights discarded) as vLLM 0.32 wants it:
        the weights' memory back, ``reload_weights`` from the model folder (over
        ``/collective_rpc``), then the KV cache."""
        if level < 2:
            self._admin("/wake_up")
            return
        self._admin("/wake_up?tags=weights")
        self._admin("/collective_rpc", {"method": "reload_weights"})
        self._admin("/wake_up?tags=kv_cache")

    def sleep(self, level: int = 1, timeout: float = 600) -> None:
        # mode=wait: requests still running finish first (the default, abort, cuts
        # them off with finish_reason "abort"); the level is a query parameter (a JSON
        # body is read as level 1 whatever it says).
        self._admin(f"/sleep?level={level}&mode=wait", timeout=timeout)

    def routes(self) -> list[str]:
        """The pool's routes this server serves: those its OpenAPI schema lists (vLLM
        registers a route only for the tasks its model runs)."""
        status, data = self.call("GET", "/openapi.json", timeout=30)
        if status != 200:
            raise VllmError(503, f"vLLM /openapi.json: {status} {data[:200]!r}")
        paths = json.loads(data).get("paths") or {}
        return from_openapi(paths)

    def progress(self) -> float | None:
        """The server's tokens prefilled and decoded so far (from ``/metrics``), None
        when it does not answer within a few seconds (a hung server)."""
        try:
            status, data = self.call("GET", "/metrics", timeout=5)
        except OSError:
            return None
        if status != 200:
            return None
        total = 0.0
        for line in data.splitlines():
            if line.startswith(PROGRESS_COUNTERS):
                with contextlib.suppress(ValueError, IndexError):
                    total += float(line.rsplit(None, 1)[1])
        return total

    def forward(
        self,
        path: str,
        body: dict[str, Any] | bytes,
        opened: Callable[[socket.socket], None] | None = None,
        content_type: str = "application/json",
    ) -> tuple[Iterator[tuple[str, bytes]], str]:
        """The request's answer and its content type: each ``data:`` payload of a
        streamed one with its ``event:`` name ("" when none; ``[DONE]`` left out), or
        the whole body of one that is not; VllmError before the first when vLLM
        refuses it. ``body``: JSON, or the client's bytes as they came (an upload, of
        ``content_type``). ``opened`` gets the connection's socket before the request
        is sent: shutting it down cancels the request (vLLM aborts a request whose
        client went away, streamed or not) and ends the wait for its answer."""
        sock = unixhttp.connect(self.uds, CONNECT_TIMEOUT)
        try:
            # Bounded connect; then no timeout: the gateway's heartbeat bounds a server
            # that stops answering, and a long answer is not a hung one.
            sock.settimeout(None)
            if opened is not None:
                opened(sock)
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            sock.sendall(unixhttp.request("POST", path, data, {"Content-Type": content_type}))
            answer = unixhttp.Answer(sock)
            if answer.status != 200:
                raise _refusal(answer.status, answer.read())
        except BaseException:
            # Refused, cancelled (its socket shut down) or the server gone: the
            # connection goes now, not when the collector finds it (a worker lives long).
            sock.close()
            raise
        kind = answer.header("content-type")
        return self._answer(answer, "text/event-stream" in kind), kind

    @staticmethod
    def _answer(answer: unixhttp.Answer, stream: bool) -> Iterator[tuple[str, bytes]]:
        try:
            if not stream:
                data = answer.read()
                if answer.cut:
                    raise unixhttp.BadAnswer("vLLM's answer ended before its end")
                yield "", data
                return
            name = last = ""
            for raw in answer.lines():
                line = raw.strip()
                if line.startswith(b"event:"):
                    name = line[6:].strip().decode(errors="replace")
                    continue
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    return
                yield name, data
                last, name = name, ""
            # A stream ends with [DONE] (a response's, with its last event): one that
            # stops before was cut (the server died), and its client must not take it
            # for whole.
            if last not in LAST_EVENTS:
                raise ConnectionError("vLLM's stream ended before its [DONE]")
        finally:
            answer.close()


def _refusal(status: int, data: bytes) -> VllmError:
    """vLLM's error body as the gateway's error (OpenAI's shape on both sides)."""
    try:
        err = json.loads(data)
        err = err.get("error", err) if isinstance(err, dict) else {}
    except ValueError:
        err = {}
    message = str(err.get("message") or data[:500].decode(errors="replace"))
    code = err.get("code")
    # vLLM puts the HTTP status there (400): OpenAI's code is a word, the status is ours
    code = "" if isinstance(code, int) or not code else str(code)
    if status == 400 and "context" in message.lower() and "length" in message.lower():
        code = "context_length_exceeded"
    return VllmError(status, message, err.get("param"), code or "vllm_error")
