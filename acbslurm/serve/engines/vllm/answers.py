"""vLLM's answers as the worker reads and changes them on their way to the gateway:
what it reads in them (``Seen``: finish reason, usage, the first text's time, and the
``done`` message made of it), the usage it asks for in a stream, and the chunks it
passes on without that usage when the client did not ask for it.
"""

from __future__ import annotations

import json
import time
from typing import Any

from acbslurm.serve.protocol import Done

# A streamed response's events with its first output
FIRST_EVENTS = ("response.output_text.delta", "response.function_call_arguments.delta")


class Seen:
    """What the worker reads in vLLM's answer: the last finish reason, the usage, the
    seconds from ``started`` to the first text."""

    def __init__(self, started: float) -> None:
        self.started = started
        self.finish = ""
        self.first = 0.0
        self.usage: dict[str, Any] = {}
        self.audio_seconds = 0.0

    # complexity: every streamed chunk's read (text, transcript, plain chunk, usage,
    # choices, a response's first event), on the per-token path: one pass.
    def read(self, data: bytes, kind: str = "application/json") -> dict[str, Any] | None:
        """The chunk read (usage, finish reason, first text); None for a plain chunk
        once the first text was seen: one choice, no finish reason, no usage, no error,
        nothing to read there, so it is passed on unparsed (every streamed token
        crosses the worker: the pool's speed is vLLM's only if that costs nothing). A
        client's text cannot fake these keys: its quotes are escaped in the JSON."""
        if "json" not in kind:  # a transcription as text, srt, vtt: nothing to read
            self.first = self.first or time.monotonic() - self.started
            return {}
        # bytes tests: no JSON parse per token
        if (
            self.first
            and b'"finish_reason":null' in data
            and data.count(b'"finish_reason"') == 1
            and b'"usage"' not in data
            and b'"error"' not in data
        ):
            return None
        ev = json.loads(data)
        if not isinstance(ev, dict):
            raise ValueError(f"vLLM sent {data[:100]!r}")
        usage = usage_of(ev)
        if usage:
            self.usage = usage
            if usage.get("type") == "duration":  # a transcription's: seconds of audio
                self.audio_seconds = float(usage.get("seconds") or 0)
        for c in ev.get("choices") or ():
            # a streamed choice's new text: ``text`` (completions) or ``delta.content``
            # (chat); a whole answer's ``text`` or ``message.content``
            text = c.get("text")
            if text is None:
                text = (c.get("delta") or c.get("message") or {}).get("content")
            if not self.first and text:
                self.first = time.monotonic() - self.started
            self.finish = c.get("finish_reason") or self.finish
        if not self.first and ev.get("type") in FIRST_EVENTS:
            self.first = time.monotonic() - self.started  # a response's or a transcript's
        return ev

    def tokens(self, *names: str) -> int:
        """The usage's count under the first of ``names`` it has (a response's usage
        says input and output tokens)."""
        for name in names:
            v = self.usage.get(name)
            if isinstance(v, int) and not isinstance(v, bool):
                return v
        return 0

    def done(
        self,
        rid: str,
        tail: tuple[str, str] | None,
        timing: dict[str, float],
        response_stream: bool,
    ) -> Done:
        """The ``done`` message of an answer relayed whole: its finish, tokens, timing,
        audio seconds, and the stream's held-back last event (``tail``), to which the
        gateway adds the pool's metrics."""
        done: Done = {
            "type": "done",
            "id": rid,
            "finish_reason": self.finish,
            "prompt_tokens": self.tokens("prompt_tokens", "input_tokens"),
            "completion_tokens": self.tokens("completion_tokens", "output_tokens"),
            "timing": {
                "wait_s": timing["wait_s"],
                "restore_s": timing["restore_s"],
                "compute_s": self.first,
            },
        }
        if self.audio_seconds:
            done["audio_seconds"] = self.audio_seconds
        if tail is not None:
            done["tail"], done["tail_event"] = tail[1], tail[0]
        if response_stream:
            done["sse_done"] = False  # a response's stream ends with its last event
        return done


def usage_of(ev: dict[str, Any]) -> dict[str, Any]:
    """An answer's (or a streamed event's) usage: its own, or its response's (a
    response's last event carries the whole response)."""
    usage = ev.get("usage")
    if not isinstance(usage, dict):
        response = ev.get("response")
        usage = response.get("usage") if isinstance(response, dict) else None
    return usage if isinstance(usage, dict) else {}


def ask_usage(body: dict[str, Any], route: str) -> bool:
    """Usage asked for in a completions or chat stream (the gateway counts tokens):
    whether the client asked for it itself (else the worker leaves it out of the
    client's stream)."""
    if not body.get("stream") or route not in ("/v1/completions", "/v1/chat/completions"):
        return True
    opts = body.get("stream_options")
    if opts is not None and not isinstance(opts, dict):
        return True  # vLLM refuses it with its own 400
    body["stream_options"] = {**(opts or {}), "include_usage": True}
    return bool((opts or {}).get("include_usage"))


def client_chunk(ev: dict[str, Any], data: bytes, asked: bool) -> str | None:
    """A streamed chunk as the client gets it: as vLLM wrote it, less the usage the
    client did not ask for (the last chunk, choices empty, is then left out)."""
    if asked or "usage" not in ev:
        return data.decode()
    if not ev.get("choices"):
        return None
    ev = {k: v for k, v in ev.items() if k != "usage"}
    return json.dumps(ev)
