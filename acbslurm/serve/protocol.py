"""Gateway <-> worker messages: one JSON object per line on a unix stream socket.

Gateway to worker: ``generate`` (id, prompt or messages, params), ``cancel`` (id).
Worker to gateway: ``ready`` (weights), ``fatal`` (message: the worker refuses to run),
``accepted`` (id, prompt_tokens) or ``error`` (id, status, message, param, code),
``delta`` (id, text), ``done`` (id, finish_reason, usage, timing), ``stats`` (counters).
A model on vLLM (``engine: vllm``) gets ``generate`` with the client's ``route`` and
``body`` whole and answers ``event`` (id, one streamed chunk as vLLM wrote it) or
``body`` (id, vLLM's whole JSON answer) instead of ``delta``.
The heartbeat (``supervisor``): ``busy`` (busy: true when a turn starts computing,
false when it ends), ``progress`` (a vLLM server's counters moved, with no chunk to
show for it: a non-streamed answer being computed), ``server`` (pid of the worker's
vLLM server, whose session the gateway kills when the model hangs).
"""

from __future__ import annotations

import json
from typing import Any

MAX_LINE = 64 << 20  # a 100k-token prompt is far below this; the gateway limits bodies


def encode(msg: dict[str, Any]) -> bytes:
    return (json.dumps(msg, separators=(",", ":")) + "\n").encode()


def decode(line: bytes) -> dict[str, Any]:
    msg = json.loads(line)
    if not isinstance(msg, dict):  # readers catch ValueError, as for json.loads's own
        raise ValueError("message is not an object")
    return msg
