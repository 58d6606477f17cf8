"""The HTTP gateway: OpenAI's API (Starlette, an ASGI app served by uvicorn).

``GET /v1/models``, ``POST /v1/completions``, ``POST /v1/chat/completions``
(server-sent events with ``stream: true``), ``GET /health``, ``GET /metrics``,
``GET /usage`` (GPU-seconds, requests and tokens per key name and model: all of them
for the pool's owner or an open pool, the caller's own otherwise).
With keys (serve/keys.py) every route but ``/health`` answers 401 to a request without
a valid ``Authorization: Bearer KEY`` before anything else is read, and ``/health``
tells such a request only ``ok`` or ``degraded`` (a probe needs no more).
Every error has OpenAI's body ``{"error": {"message", "type", "param", "code"}}``;
overload and unavailable models answer 429/503 with ``Retry-After`` at once, and no
request waits longer than the pool's ``request_timeout``. For a model on vLLM the
body goes to its worker whole after the gateway's own checks, and vLLM's answer comes
back whole (``_pass_through``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from acbslurm.serve.answers import Answers
from acbslurm.serve.api import (
    ApiError,
    check_passthrough_size,
    check_prompt_size,
    parse_chat,
    parse_completion,
    parse_passthrough,
)
from acbslurm.serve.engines import engine_kind
from acbslurm.serve.keys import NO_KEY, KeyRing, bearer
from acbslurm.serve.limits import Limiter
from acbslurm.serve.metrics import CONTENT_TYPE, Metrics
from acbslurm.serve.protocol import Generate
from acbslurm.serve.routes import BUILTIN, PROMPT_FIELD, not_served, served
from acbslurm.serve.supervisor import Overloaded, Pending, Unavailable, WorkerHandle
from acbslurm.units import is_ascii_int
from acbslurm.usagebook import Book, Totals, UsageFiles

log = logging.getLogger(__name__)
MAX_BODY = 8 << 20  # bytes; a 100k-token prompt is well below


# Bytes of an upload's form besides its file (model, language, prompt, ...).
FORM_SLACK = 64 << 10
_TRUE = ("1", "t", "true", "y", "yes", "on")  # what vLLM's form model reads as true


# What a request gets from a stopping pool (new, or still queued), and when to retry:
# a requeued pool job, or the admin's restart, is back within a minute or so.
STOPPING = "the pool is stopping; retry later"
STOPPING_RETRY_AFTER = 30


def _caller(request: Request) -> str:
    """The NAME of the request's key (``_KeyCheck``): who the request is billed to."""
    return str(request.scope.get("state", {}).get("key") or NO_KEY)


# OpenAI's answers to a request without a key and with a wrong one (the wrong key is
# not repeated back, not even in part).
NO_KEY_GIVEN = ApiError(
    401,
    "You didn't provide an API key. You need to provide your API key in an Authorization "
    "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
    code="invalid_api_key",
)
WRONG_KEY = ApiError(
    401,
    "Incorrect API key provided. Ask the pool's owner for a key (acbslurm status "
    "names the pool job's key file).",
    code="invalid_api_key",
)


class _KeyCheck:
    """ASGI middleware: the request's key checked before any route runs. Its NAME goes
    on the request (``scope["state"]["key"]``, read by ``_caller``); no key or a wrong
    one is a 401 in OpenAI's shape, except on ``/health``, which then answers less.
    A key with limits (serve/limits.py): refused past its ``expires`` (401), and its
    answers on ``/v1/`` carry what is left of its limits (``x-ratelimit-*``)."""

    def __init__(
        self, app: Any, keys: KeyRing | None, metrics: Metrics, limiter: Limiter | None = None
    ) -> None:
        self.app = app
        self.keys = keys
        self.metrics = metrics
        self.limiter = limiter
        self._no_key = json.dumps(NO_KEY_GIVEN.body()).encode()
        self._wrong_key = json.dumps(WRONG_KEY.body()).encode()

    # complexity: every request's key check, each branch one answer (pass, 401 without
    # or with a wrong key, 401 expired, limits' headers); split, each request would pay
    # a coroutine per step on the pool's request path.
    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or self.keys is None:
            await self.app(scope, receive, send)
            return
        presented = bearer(scope["headers"])
        name = self.keys.check(presented) if presented is not None else None
        scope.setdefault("state", {})["key"] = name
        if name is None and scope["path"] != "/health":
            self.metrics.request(NO_KEY, 401, NO_KEY)
            await self._refuse(send, self._no_key if presented is None else self._wrong_key)
            return
        if name is not None and self.limiter is not None and name in self.limiter.limits:
            expired = self.limiter.expired(name)
            if expired is not None and scope["path"] != "/health":
                self.metrics.request(NO_KEY, 401, name)
                await self._refuse(send, json.dumps(expired.body()).encode())
                return
            if scope["path"].startswith("/v1/"):
                # the key's remaining limits added to the answer's headers, as they are
                # when the answer starts (this request counted)
                limiter, reply = self.limiter, send

                async def with_limits(message: Any) -> None:
                    if message["type"] == "http.response.start":
                        headers = [*message.get("headers", ()), *limiter.headers(name)]
                        message = {**message, "headers": headers}
                    await reply(message)

                send = with_limits

        await self.app(scope, receive, send)

    @staticmethod
    async def _refuse(send: Any, body: bytes) -> None:
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"www-authenticate", b'Bearer realm="acbslurm"'),
        ]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _error(e: ApiError) -> JSONResponse:
    headers = {"Retry-After": str(e.retry_after)} if e.retry_after is not None else None
    return JSONResponse(e.body(), status_code=e.status, headers=headers)


class Gateway:
    def __init__(
        self,
        handles: Mapping[str, WorkerHandle],
        request_timeout: float = 300.0,
        on_ready: Callable[[], None] | None = None,
        keys: KeyRing | None = None,
        owner: str = "",
        usage_files: UsageFiles | None = None,
        limiter: Limiter | None = None,
        max_audio: int = 25 << 20,
    ) -> None:
        self.handles = dict(handles)
        self.max_audio = max_audio  # bytes of an upload to /v1/audio/* (pool: max_audio)
        # Who used the GPUs (usagebook): one book for every model, written to the job's
        # runtime folder in a Slurm job (``usage_files``) for the epilog to keep.
        self.usage_files = usage_files
        self.book = Book() if usage_files is None else usage_files.book
        if self.usage_files is not None:
            self.book.write = self.usage_files.line
        # Limits per key NAME (serve/limits.py): fed the ledger's lines (tokens, shares
        # of leases) as the book makes them, asked before a request is queued.
        self.limiter = limiter
        if limiter is not None:
            ledger = self.book.write

            def write(line: Any) -> None:  # to the ledger (when there is one) first
                if ledger is not None:
                    ledger(line)
                limiter.observe(line)

            self.book.write = write
        for h in self.handles.values():
            h.book = self.book
        self.owner = owner  # the key name that sees every name's usage
        self.stopping = False  # drain() began: no request is taken any more
        self.keys = keys  # None: an open pool, no key asked
        self.on_ready = on_ready
        self._ready_task: asyncio.Task[None] | None = None
        self.request_timeout = request_timeout
        self.metrics = Metrics(list(self.handles.values()), self.book)
        self.answers = Answers(self.metrics, self.book, request_timeout)
        self.created = int(time.time())
        self.app = Starlette(
            routes=[
                Route("/v1/models", self.models, methods=["GET"]),
                Route("/v1/models/{name:path}", self.model, methods=["GET"]),
                Route("/v1/completions", self.completions, methods=["POST"]),
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/v1/responses", self.json_route, methods=["POST"]),
                Route("/v1/embeddings", self.json_route, methods=["POST"]),
                Route("/v1/audio/transcriptions", self.audio, methods=["POST"]),
                Route("/v1/audio/translations", self.audio, methods=["POST"]),
                Route("/health", self.health, methods=["GET"]),
                Route("/metrics", self.prometheus, methods=["GET"]),
                Route("/usage", self.usage, methods=["GET"]),
            ],
            exception_handlers={HTTPException: self._http_error},  # type: ignore[dict-item]
            lifespan=self._lifespan,
            middleware=[Middleware(_KeyCheck, keys=keys, metrics=self.metrics, limiter=limiter)],
        )

    async def drain(self, grace: float) -> None:
        """The pool stops: new requests and those still queued get 503 with Retry-After
        (OpenAI's error shape); those being computed have ``grace`` seconds to finish,
        then end with an error (an error event for a stream, never a cut that looks
        whole); then the workers stop. One line says what it did."""
        self.stopping = True
        handles = list(self.handles.values())
        queued = sum(
            h.fail_queued(STOPPING, "pool_stopping", STOPPING_RETRY_AFTER) for h in handles
        )
        running = sum(len(h.pending) for h in handles)
        deadline = time.monotonic() + grace
        while any(h.pending for h in handles) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        cut = sum(len(h.pending) for h in handles)
        await asyncio.gather(*(h.stop() for h in handles))
        if queued or running:
            log.warning(
                "stopping: %d queued request(s) answered 503; %d being computed, %d of "
                "them ended with an error after the %gs grace",
                queued,
                running,
                cut,
                grace,
            )

    # Starlette's lifespan signature: the app is passed, and the gateway holds it already.
    @asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:  # noqa: ARG002
        for h in self.handles.values():
            h.start()
        if self.on_ready is not None:
            self._ready_task = asyncio.get_running_loop().create_task(self._when_ready())
        keeper = asyncio.get_running_loop().create_task(self._keep_usage())
        try:
            yield
        finally:
            if self._ready_task is not None:
                self._ready_task.cancel()
            keeper.cancel()
            await asyncio.gather(*(h.stop() for h in self.handles.values()))
            if self.usage_files is not None:
                self._budgets_to_totals()
                self.usage_files.close()  # the totals, with every lease the stop ended
            if self.limiter is not None:
                self.limiter.save()  # the budgets' use, with every lease the stop ended

    async def _keep_usage(self) -> None:
        """The usage totals written once a second while they change: the epilog then
        replays at most a second of the ledger's lines. The budgets' use likewise."""
        if self.usage_files is None and self.limiter is None:
            return
        seen = -1
        while True:
            await asyncio.sleep(1.0)
            if self.usage_files is not None and self.book.events != seen:
                seen = self.book.events
                self._budgets_to_totals()
                self.usage_files.flush()
            if self.limiter is not None and self.limiter.dirty:
                self.limiter.save()

    def _budgets_to_totals(self) -> None:
        """The keys' budgets and their use go with the totals, for the report."""
        if self.limiter is not None:
            self.book.totals.budgets = self.limiter.budgets()

    async def _when_ready(self) -> None:
        """Call ``on_ready`` once every worker is ready or refused (its first start)."""
        await asyncio.gather(*(h.ready_event.wait() for h in self.handles.values()))
        if self.on_ready is not None:
            try:
                self.on_ready()
            except Exception:
                log.exception("after the workers started")

    async def _http_error(self, request: Request, exc: HTTPException) -> Response:
        code = "not_found" if exc.status_code == 404 else "method_not_allowed"
        return _error(
            ApiError(
                exc.status_code, f"{request.method} {request.url.path}: {exc.detail}", code=code
            )
        )

    # -- simple routes ------------------------------------------------------------------

    def _model_obj(self, name: str) -> dict[str, Any]:
        return {"id": name, "object": "model", "created": self.created, "owned_by": "acbslurm"}

    # Starlette's handler signature: every route is called with the request, used or not.
    async def models(self, request: Request) -> Response:  # noqa: ARG002
        return JSONResponse({"object": "list", "data": [self._model_obj(n) for n in self.handles]})

    async def model(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in self.handles:
            return _error(self._unknown(name))
        return JSONResponse(self._model_obj(name))

    async def health(self, request: Request) -> Response:
        ok = all(h.state == "ready" for h in self.handles.values())
        body: dict[str, Any] = {"status": "ok" if ok else "degraded"}
        # A probe without a key learns whether the pool serves, not what it serves.
        if self.keys is None or _caller(request) != NO_KEY:
            body.update(self._health_detail())
        return JSONResponse(body, status_code=200 if ok else 503)

    def _health_detail(self) -> dict[str, Any]:
        """Each model's state, why one is not ready, how often each hung."""
        detail: dict[str, Any] = {
            "models": {n: h.state for n, h in self.handles.items()},
            "reasons": {n: h.reason for n, h in self.handles.items() if h.reason},
        }
        hangs = {n: h.hangs for n, h in self.handles.items() if h.hangs}
        if hangs:  # how often each model hung (supervisor's heartbeat), once it has
            detail["hangs"] = hangs
        return detail

    def _sees_all(self, caller: str) -> bool:
        """Whether ``caller`` sees every key name's usage: the pool's owner, or anyone
        in an open pool; any other key sees its own name's rows only."""
        return self.keys is None or (bool(self.owner) and caller == self.owner)

    async def prometheus(self, request: Request) -> Response:
        """Every key name's rows for the owner (or an open pool), the caller's own
        otherwise, as ``/usage`` does."""
        caller = _caller(request)
        only = None if self._sees_all(caller) else caller
        return Response(self.metrics.render(only), media_type=CONTENT_TYPE)

    async def usage(self, request: Request) -> Response:
        """GPU-seconds, requests and tokens per key name and model, and the leased
        GPU-seconds per model: every name's for the pool's owner (or an open pool), the
        caller's own name's otherwise; and the limits of those names, with what is left."""
        caller = _caller(request)
        everyone = self._sees_all(caller)
        totals = self.book.totals
        rows = self._usage_rows(totals, None if everyone else caller)
        body: dict[str, Any] = {"object": "acbslurm.usage", "usage": rows}
        if everyone:
            body["leased_gpu_seconds"] = {m: round(v, 3) for m, v in sorted(totals.leased.items())}
        if self.limiter is not None:
            names = sorted(self.limiter.limits) if everyone else [caller]
            states = {n: self.limiter.state(n) for n in names}
            body["limits"] = {n: s for n, s in states.items() if s is not None}
        return JSONResponse(body)

    def _usage_rows(self, totals: Totals, only: str | None) -> list[dict[str, Any]]:
        """``/usage``'s rows: one per key name and model, of every name (``only`` None)
        or of the name ``only``."""
        return [
            {
                "key": name,
                "model": model,
                "requests": int(row[0]),
                "prompt_tokens": int(row[1]),
                "completion_tokens": int(row[2]),
                "gpu_seconds": round(row[3], 3),
                "audio_seconds": self.answers.audio_seconds.get((name, model), 0.0),
            }
            for (name, model), row in sorted(totals.use.items())
            if only is None or name == only
        ]

    def _unknown(self, name: str) -> ApiError:
        return ApiError(
            404,
            f"The model {name!r} does not exist. Models served here: {', '.join(self.handles)}",
            "model",
            "model_not_found",
        )

    # -- generation ---------------------------------------------------------------------

    async def completions(self, request: Request) -> Response:
        return await self._generate(request, chat=False)

    async def chat(self, request: Request) -> Response:
        return await self._generate(request, chat=True)

    @staticmethod
    async def _read_body(request: Request, limit: int, too_big: ApiError) -> bytearray:
        """The whole body, or ``too_big`` raised once it is over ``limit`` bytes (or its
        Content-Length says it will be)."""
        length = request.headers.get("content-length")
        if length is not None and is_ascii_int(length) and int(length) > limit:
            raise too_big
        data = bytearray()  # appended in place: ``bytes +=`` copies it all per chunk
        async for chunk in request.stream():
            data += chunk
            if len(data) > limit:
                raise too_big
        return data

    @staticmethod
    async def _read_json(request: Request) -> Any:
        too_big = ApiError(
            413, f"request body larger than {MAX_BODY >> 20} MiB", code="body_too_large"
        )
        data = await Gateway._read_body(request, MAX_BODY, too_big)
        try:
            return json.loads(data)
        except RecursionError:  # "[[[[...": nested past Python's recursion limit
            msg = "the body is not valid JSON: nested too deep"
            raise ApiError(400, msg, code="invalid_json") from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise ApiError(400, f"the body is not valid JSON: {exc}", code="invalid_json") from None

    async def _generate(self, request: Request, chat: bool) -> Response:
        try:
            return await self._answer(request, chat)
        except ClientDisconnect:
            # Gone before its body arrived: nobody to answer, nothing wrong here.
            log.info("%s: the client went away before sending its body", request.url.path)
            return Response(status_code=400)

    # complexity: one request's whole path (parse, route, admit, first token, stream or
    # collect) with the HTTP status each failure maps to; split, the mapping of errors
    # to statuses would be spread over the steps that raise them.
    async def _answer(self, request: Request, chat: bool) -> Response:
        model = ""
        try:
            raw = await self._read_json(request)
            handle = self._vllm_handle(raw)
            if handle is not None:
                model = handle.spec.name
                fields = ("messages",) if chat else ("prompt",)
                return await self._pass_through(request, raw, handle, fields)
            body = parse_chat(raw) if chat else parse_completion(raw)
            model = body["model"]
            handle = self.handles.get(model)
            if handle is None:
                model = ""
                raise self._unknown(body["model"])
            self._check_served(handle, request.url.path)
            deadline = time.monotonic() + self.request_timeout
            work: Generate = {
                "type": "generate",
                "id": "",  # the supervisor's, once queued
                "max_tokens": body["max_tokens"],
                "temperature": body["temperature"],
                "top_p": body["top_p"],
                "seed": body["seed"],
                "stop": body["stop"],
            }
            if chat:
                work["messages"] = body["messages"]
            else:
                work["prompt"] = body["prompt"]
            check_prompt_size(work, handle.max_prompt_chars, handle.max_context)
            rid, pending = await self._start(request, handle, work, deadline)
            if body["stream"]:
                gen = self.answers.stream(
                    handle, rid, pending, deadline, chat, body["include_usage"]
                )
                self.metrics.request(model, 200, pending.key)
                return StreamingResponse(
                    gen, media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
                )
            async with self._cancel_when_gone(request, handle, rid, pending):
                return await self.answers.collect(handle, rid, pending, deadline, chat)
        except ApiError as e:
            self.metrics.request(model or "-", e.status, _caller(request))
            return _error(e)

    async def _start(
        self, request: Request, handle: WorkerHandle, work: Generate, deadline: float
    ) -> tuple[str, Pending]:
        """The request queued and its worker's first answer read: the request's id and
        its queue, or the worker's refusal raised (the request then forgotten). A client
        that goes away meanwhile cancels it: a non-streamed request on vLLM has its
        first answer only when the whole of it is computed."""
        if self.limiter is not None:  # its limits, before the request takes a place
            self.limiter.admit(_caller(request), handle.spec.name)
        rid, pending = self._submit(handle, work, _caller(request))
        try:
            async with self._cancel_when_gone(request, handle, rid, pending):
                await self.answers.next(handle, rid, pending, deadline)
        except BaseException:
            handle.finish(rid, cancel=True)
            raise
        return rid, pending

    def _submit(self, handle: WorkerHandle, work: Generate, key: str) -> tuple[str, Pending]:
        """The request queued for the model's worker (billed to ``key``), or 429/503 at once."""
        if self.stopping:
            raise ApiError(
                503, STOPPING, None, "pool_stopping", "server_error", STOPPING_RETRY_AFTER
            )
        try:
            return handle.submit(work, key)
        except Overloaded as exc:
            raise ApiError(
                429, str(exc), None, "overloaded", "rate_limit_error", exc.retry_after
            ) from None
        except Unavailable as exc:
            raise ApiError(
                503, str(exc), None, "model_unavailable", "server_error", exc.retry_after
            ) from None

    # -- engine: vllm: the client's body to vLLM whole, vLLM's answer back whole --------

    def _vllm_handle(self, raw: Any) -> WorkerHandle | None:
        """The handle of the model ``raw`` names when that model runs on vLLM."""
        name = raw.get("model") if isinstance(raw, dict) else None
        handle = self.handles.get(name) if isinstance(name, str) else None
        passes = handle is not None and engine_kind(handle.spec.engine).passes_through
        return handle if passes else None

    async def _pass_through(
        self,
        request: Request,
        raw: dict[str, Any],
        handle: WorkerHandle,
        fields: tuple[str, ...],
        per_item: bool = False,
    ) -> Response:
        """A request for a model on vLLM: acbslurm's own checks (``parse_passthrough``),
        the route served by the model, the prompt's bound (in ``fields``), the queue and
        the timeout; vLLM validates the rest and its refusals come back as it wrote them
        (status, message, param)."""
        checked = parse_passthrough(raw, fields=fields, per_item=per_item)
        self._check_served(handle, request.url.path)
        check_passthrough_size(checked, handle.max_prompt_chars, handle.max_context)
        path, chars = request.url.path, checked["chars"]
        work: Generate = {"type": "generate", "id": "", "route": path, "body": raw, "chars": chars}
        return await self._forward(request, handle, work, checked["stream"])

    async def _forward(
        self,
        request: Request,
        handle: WorkerHandle,
        work: Generate,
        stream: bool,
        metrics: bool = True,
    ) -> Response:
        """``work`` to the model's vLLM worker; its answer relayed (a stream) or whole
        (with the pool's ``metrics`` in its JSON, unless the client asked for text)."""
        deadline = time.monotonic() + self.request_timeout
        rid, pending = await self._start(request, handle, work, deadline)
        if stream:
            self.metrics.request(handle.spec.name, 200, pending.key)
            return StreamingResponse(
                self.answers.relay(handle, rid, pending, deadline),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache"},
            )
        async with self._cancel_when_gone(request, handle, rid, pending):
            return await self.answers.whole(handle, rid, pending, deadline, metrics)

    @contextlib.asynccontextmanager
    async def _cancel_when_gone(
        self, request: Request, handle: WorkerHandle, rid: str, pending: Pending
    ) -> AsyncIterator[None]:
        """While a non-streamed request is computed: if its client goes away, the
        request is cancelled (the worker stops computing it, the lease can go), as a
        stream's is when its client stops reading."""
        task = asyncio.get_running_loop().create_task(self._gone(request, handle, rid, pending))
        try:
            yield
        finally:
            task.cancel()

    @staticmethod
    async def _gone(request: Request, handle: WorkerHandle, rid: str, pending: Pending) -> None:
        # The body has been read: the server's receive() now answers only when the
        # client disconnects (or the response is complete; this task is gone by then).
        while (await request.receive())["type"] != "http.disconnect":
            await asyncio.sleep(0.05)  # not a disconnect: look again, never spinning
        log.info("model %s: request %s: the client went away; cancelled", handle.spec.name, rid)
        handle.finish(rid, cancel=True)
        pending.queue.put_nowait(
            {"type": "error", "status": 499, "message": "the client went away", "code": "gone"}
        )

    # -- the other routes vLLM serves: responses, embeddings, audio ----------------------

    def _check_served(self, handle: WorkerHandle, path: str) -> None:
        """404 in OpenAI's shape when the model does not serve ``path`` (serve/routes.py):
        the built-in engine serves completions and chat, a vLLM model what its server
        does (known once it is ready: before, the queue answers 503)."""
        routes = self._routes_of(handle)
        if routes is not None and path not in routes:
            others = {n: self._routes_of(h) or () for n, h in self.handles.items()}
            raise not_served(handle.spec.name, path, routes, others)

    @staticmethod
    def _routes_of(handle: WorkerHandle) -> list[str] | None:
        if not engine_kind(handle.spec.engine).passes_through:
            return served(handle.spec.routes, BUILTIN)
        return handle.routes

    def _served_handle(self, name: Any, path: str) -> WorkerHandle:
        """The handle of the model ``name`` when it serves ``path``; 400, 404 else."""
        if not isinstance(name, str) or not name:
            raise ApiError(
                400, "model: required (a model name from GET /v1/models)", "model", "missing_field"
            )
        handle = self.handles.get(name)
        if handle is None:
            raise self._unknown(name)
        self._check_served(handle, path)
        return handle

    async def json_route(self, request: Request) -> Response:
        """``/v1/responses`` and ``/v1/embeddings``: to a model on vLLM that serves them,
        as completions and chat go (``_pass_through``)."""
        model = ""
        try:
            raw = await self._read_json(request)
            if not isinstance(raw, dict):
                raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
            path = request.url.path
            handle = self._served_handle(raw.get("model"), path)
            model = handle.spec.name
            fields = (PROMPT_FIELD[path], "instructions")
            # an embeddings request's inputs are prompts of their own: bounded each
            embeddings = path == "/v1/embeddings"
            return await self._pass_through(request, raw, handle, fields, per_item=embeddings)
        except ApiError as e:
            self.metrics.request(model or "-", e.status, _caller(request))
            return _error(e)
        except ClientDisconnect:
            log.info("%s: the client went away before sending its body", request.url.path)
            return Response(status_code=400)

    async def audio(self, request: Request) -> Response:
        """``/v1/audio/transcriptions`` and ``/translations``: a multipart upload of at
        most ``max_audio`` bytes (413 over it), passed to the model's vLLM server as
        the client sent it; its form read here only for ``model`` and ``stream``."""
        model = ""
        try:
            # the whole upload, or 413 once it is over max_audio (and its form's fields)
            too_big = ApiError(
                413,
                f"the upload is larger than this pool takes ({self.max_audio >> 20} MiB of "
                "audio: max_audio in the pool file)",
                "file",
                "body_too_large",
            )
            data = await self._read_body(request, self.max_audio + FORM_SLACK, too_big)
            form = await self._form(request, data)
            handle = self._served_handle(form.get("model"), request.url.path)
            model = handle.spec.name
            work: Generate = {
                "type": "generate",
                "id": "",
                "route": request.url.path,
                "upload": base64.b64encode(data).decode(),
                "content_type": request.headers.get("content-type", ""),
                "chars": 0,
            }
            stream = str(form.get("stream") or "").strip().lower() in _TRUE
            # asked for text (text, srt, vtt), the client gets vLLM's answer untouched
            text = form.get("response_format", "json") not in ("json", "verbose_json")
            return await self._forward(request, handle, work, stream, metrics=not text)
        except ApiError as e:
            self.metrics.request(model or "-", e.status, _caller(request))
            return _error(e)
        except ClientDisconnect:
            log.info("%s: the client went away before sending its body", request.url.path)
            return Response(status_code=400)

    @staticmethod
    async def _form(request: Request, data: bytearray) -> Any:
        """The upload's form fields (the file itself is not kept)."""
        kind = request.headers.get("content-type", "")
        if not kind.startswith("multipart/form-data"):
            raise ApiError(
                400,
                f"an audio upload is multipart/form-data (file, model, ...), not {kind[:60]!r}",
                None,
                "invalid_form",
            )
        body = bytes(data)

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        try:
            form = await Request(request.scope, receive).form(max_files=1, max_fields=64)
        except HTTPException as exc:
            raise ApiError(400, f"the upload's form: {exc.detail}", None, "invalid_form") from None
        fields = {k: v for k, v in form.items() if isinstance(v, str)}
        await form.close()
        return fields
