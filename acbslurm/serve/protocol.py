"""Gateway <-> worker messages: one JSON object per line on a unix stream socket.

Gateway to worker: ``generate`` (id, prompt or messages, params), ``cancel`` (id).
An upload (``/v1/audio/*``) crosses as ``upload`` (the client's multipart body,
base64) with its ``content_type``.
Worker to gateway: ``ready`` (weights), ``fatal`` (message: the worker refuses to run),
``accepted`` (id, prompt_tokens) or ``error`` (id, status, message, param, code),
``delta`` (id, text), ``done`` (id, finish_reason, usage, timing), ``stats`` (counters).
A model on vLLM (``engine: vllm``) gets ``generate`` with the client's ``route`` and
``body`` whole and answers ``event`` (id, one streamed chunk as vLLM wrote it) or
``body`` (id, vLLM's whole JSON answer) instead of ``delta``.
The heartbeat (``supervisor``): ``busy`` (busy: true when a turn starts computing,
false when it ends), ``progress`` (a vLLM server's counters moved, with no chunk to
show for it: a non-streamed answer being computed), ``server`` (pid of the worker's
vLLM server, whose session the gateway kills when the model hangs or the worker ends,
its shared memory files and its folder).

``decode_to_worker`` and ``decode_to_gateway`` return a line as its message type (the
fields each type requires checked; ``ProtocolError`` otherwise), so that a reader
dispatches with ``match msg["type"]`` and mypy narrows ``msg`` in each case.

No ``from __future__ import annotations`` here: ``decode`` reads each message's
required fields from its class at run time (``__required_keys__``), which string
annotations hide ``NotRequired`` from on Python 3.11.
"""

import json
from collections.abc import Mapping
from typing import Any, Literal, NotRequired, Required, TypedDict, cast

from acbslurm.serve.errors import ProtocolError

MAX_LINE = 64 << 20  # a 100k-token prompt is far below this; the gateway limits bodies


# -- gateway to worker ------------------------------------------------------------------


class Generate(TypedDict):
    type: Literal["generate"]
    id: str
    # the built-in engine: prompt or messages, and the sampling (serve/api.py checked it)
    prompt: NotRequired[str]
    messages: NotRequired[list[dict[str, str]]]
    max_tokens: NotRequired[int | None]
    temperature: NotRequired[float | None]
    top_p: NotRequired[float | None]
    seed: NotRequired[int | None]
    stop: NotRequired[list[str]]
    # vLLM: the route and the client's body whole, or an upload, and the prompt's size
    route: NotRequired[str]
    body: NotRequired[dict[str, Any]]
    chars: NotRequired[int]
    upload: NotRequired[str]  # an upload's bytes, base64
    content_type: NotRequired[str]


class Cancel(TypedDict):
    type: Literal["cancel"]
    id: str


# -- worker to gateway ------------------------------------------------------------------


class Ready(TypedDict):
    type: Literal["ready"]
    weights_bytes: int
    max_context: int
    max_prompt_chars: int
    routes: list[str]  # the paths it serves (serve/routes.py)


class Fatal(TypedDict):
    type: Literal["fatal"]
    exit: int
    message: str


class Accepted(TypedDict):
    type: Literal["accepted"]
    id: str
    prompt_tokens: NotRequired[int]  # the built-in engine's (it tokenizes)


class Error(TypedDict):
    type: Literal["error"]
    id: NotRequired[str]  # not on those the gateway makes for its own waiters
    status: int
    message: str
    param: NotRequired[str | None]
    code: str
    retry_after: NotRequired[int]


class Delta(TypedDict):
    type: Literal["delta"]
    id: str
    text: str


class Event(TypedDict):
    type: Literal["event"]
    id: str
    data: str
    event: NotRequired[str]  # its SSE event name (a response's stream names each)


class Body(TypedDict):
    type: Literal["body"]
    id: str
    data: str
    content_type: NotRequired[str]  # vLLM's (a transcription may be text, srt, vtt)


class Timing(TypedDict):
    wait_s: float
    restore_s: float
    compute_s: float | None


class Done(TypedDict):
    type: Literal["done"]
    id: str
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    timing: Timing
    audio_seconds: NotRequired[float]  # a transcription's audio
    # vLLM's stream: its last event with the usage, held back so that the gateway adds
    # the pool's metrics to it, with its event name; whether the stream ends [DONE]
    tail: NotRequired[str]
    tail_event: NotRequired[str]
    sse_done: NotRequired[bool]


class Busy(TypedDict):
    type: Literal["busy"]
    busy: bool
    granted: NotRequired[float]  # with busy: the lease the turn computes in (usagebook)
    devices: NotRequired[list[str]]


class Progress(TypedDict):
    type: Literal["progress"]


class Server(TypedDict):
    type: Literal["server"]
    pid: int
    shm: list[str]  # its /dev/shm files, for the gateway to remove if it kills it
    folder: str  # its $TMPDIR/acbslurm-vllm-* folder, removed when the worker is gone


class Lease(TypedDict):
    type: Literal["lease"]
    devices: list[str]
    granted: float
    released: float


class Rendezvous(TypedDict):
    type: Literal["rendezvous"]
    address: str


class GroupFailed(TypedDict):
    type: Literal["group_failed"]
    message: str


class Stats(TypedDict, total=False):
    """The worker's counters (supervisor.STATS_COUNTERS) and bytes, for /metrics."""

    type: Required[Literal["stats"]]
    gpu_wait_seconds: float
    turns: int
    swaps_in: int
    swaps_out: int
    swap_in_seconds: float
    swap_out_seconds: float
    resident_bytes: int
    evicted_bytes: int
    weights_bytes: int
    sleep_residue_bytes: int
    queued: int


ToWorker = Generate | Cancel
ToGateway = (
    Ready
    | Fatal
    | Accepted
    | Error
    | Delta
    | Event
    | Body
    | Done
    | Busy
    | Progress
    | Server
    | Lease
    | Rendezvous
    | GroupFailed
    | Stats
)


def encode(msg: ToWorker | ToGateway) -> bytes:
    return (json.dumps(msg, separators=(",", ":")) + "\n").encode()


# What a request's waiter at the gateway gets (supervisor.Pending's queue).
ForRequest = Accepted | Error | Delta | Event | Body | Done

_TO_WORKER: dict[str, type[Any]] = {"generate": Generate, "cancel": Cancel}
_TO_GATEWAY: dict[str, type[Any]] = {
    "ready": Ready,
    "fatal": Fatal,
    "accepted": Accepted,
    "error": Error,
    "delta": Delta,
    "event": Event,
    "body": Body,
    "done": Done,
    "busy": Busy,
    "progress": Progress,
    "server": Server,
    "lease": Lease,
    "rendezvous": Rendezvous,
    "group_failed": GroupFailed,
    "stats": Stats,
}


def _checked(line: bytes, kinds: Mapping[str, type[Any]]) -> dict[str, Any]:
    """``line`` as a message of one of ``kinds``, with every field its type requires."""
    try:
        msg = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"a message is not JSON: {exc}: {line[:80]!r}") from None
    if not isinstance(msg, dict):
        raise ProtocolError(f"a message is not a JSON object: {line[:80]!r}")
    kind = msg.get("type")
    if not isinstance(kind, str) or kind not in kinds:
        expected = ", ".join(kinds)
        raise ProtocolError(f"a message of unknown type {kind!r} (expected one of {expected})")
    missing = kinds[kind].__required_keys__ - msg.keys()
    if missing:
        raise ProtocolError(f"a {kind!r} message without {', '.join(sorted(missing))}")
    return msg


def decode_to_worker(line: bytes) -> ToWorker:
    """A line from the gateway, as its message (``ProtocolError`` if it is not one)."""
    return cast(ToWorker, _checked(line, _TO_WORKER))


def decode_to_gateway(line: bytes) -> ToGateway:
    """A line from a worker, as its message (``ProtocolError`` if it is not one)."""
    return cast(ToGateway, _checked(line, _TO_GATEWAY))
