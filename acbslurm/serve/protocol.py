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
"""

from __future__ import annotations

import json
from typing import Any, Literal, NotRequired, TypedDict

MAX_LINE = 64 << 20  # a 100k-token prompt is far below this; the gateway limits bodies


# -- gateway to worker ------------------------------------------------------------------


class Generate(TypedDict, total=False):
    type: Literal["generate"]
    id: str
    # the built-in engine: prompt or messages, max_tokens, temperature, top_p, seed, stop;
    # vLLM: route, body (the client's, whole), chars
    prompt: Any
    messages: Any
    route: str
    body: dict[str, Any]
    upload: str  # an upload's bytes, base64
    content_type: str


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


class Accepted(TypedDict, total=False):
    type: Literal["accepted"]
    id: str
    prompt_tokens: int


class Error(TypedDict, total=False):
    type: Literal["error"]
    id: str
    status: int
    message: str
    param: str | None
    code: str
    retry_after: int


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


class Busy(TypedDict, total=False):
    type: Literal["busy"]
    busy: bool
    granted: float  # with busy: the lease the turn computes in (usagebook)
    devices: list[str]


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

    type: Literal["stats"]
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


def decode(line: bytes) -> dict[str, Any]:
    msg = json.loads(line)
    if not isinstance(msg, dict):  # readers catch ValueError, as for json.loads's own
        raise ValueError("message is not an object")
    return msg
