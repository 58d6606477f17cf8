"""The OpenAI request bodies the gateway accepts, checked field by field.

``parse_completion`` and ``parse_chat`` return what the worker needs or raise
``ApiError`` naming the field (``param``), which the gateway turns into OpenAI's
error body. Fields clients commonly send that do not change the result here
(``user``, ``presence_penalty`` = 0, ...) are accepted and ignored; fields that
would change it and are not implemented (``n`` > 1, ``logprobs``, ``echo``, tools)
are refused with a 400 rather than silently ignored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass
class ApiError(Exception):
    status: int
    message: str
    param: str | None = None
    code: str | None = None
    type: str = "invalid_request_error"
    retry_after: int | None = None

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


def _bad(param: str, message: str) -> ApiError:
    return ApiError(400, f"{param}: {message}", param=param, code="invalid_value")


def _number(body: dict[str, Any], key: str, low: float, high: float) -> float | None:
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise _bad(key, f"must be a number, got {v!r}")
    if not low <= v <= high:
        raise _bad(key, f"must be between {low:g} and {high:g}, got {v}")
    return float(v)


def _int(body: dict[str, Any], key: str, low: int) -> int | None:
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise _bad(key, f"must be an integer, got {v!r}")
    if v < low:
        raise _bad(key, f"must be at least {low}, got {v}")
    return v


def _common(body: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(
            400, "model: required (a model name from GET /v1/models)", "model", "missing_field"
        )
    out: dict[str, Any] = {"model": model}
    mt = _int(body, "max_completion_tokens", 1)
    if mt is None:
        mt = _int(body, "max_tokens", 1)
    out["max_tokens"] = mt
    out["temperature"] = _number(body, "temperature", 0.0, 2.0)
    out["top_p"] = _number(body, "top_p", 0.0, 1.0)
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise _bad("seed", f"must be an integer, got {seed!r}")
    out["seed"] = seed
    n = _int(body, "n", 1)
    if n not in (None, 1):
        raise ApiError(400, "n: only n=1 is supported", "n", "unsupported_value")
    stop = body.get("stop")
    if stop is None:
        stops: list[str] = []
    elif isinstance(stop, str):
        stops = [stop]
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop) and len(stop) <= 4:
        stops = list(stop)
    else:
        raise _bad("stop", "must be a string or a list of up to 4 strings")
    out["stop"] = [s for s in stops if s]
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise _bad("stream", f"must be true or false, got {stream!r}")
    out["stream"] = stream
    opts = body.get("stream_options") or {}
    if not isinstance(opts, dict):
        raise _bad("stream_options", "must be an object")
    out["include_usage"] = bool(opts.get("include_usage", False))
    for key in ("frequency_penalty", "presence_penalty"):
        v = _number(body, key, -2.0, 2.0)
        if v:
            raise ApiError(400, f"{key}: not supported (only 0)", key, "unsupported_value")
    for key in ("logprobs", "top_logprobs", "tools", "functions", "logit_bias", "suffix"):
        if body.get(key) not in (None, False, [], {}):
            raise ApiError(400, f"{key}: not supported by this server", key, "unsupported_value")
    if body.get("echo"):
        raise ApiError(400, "echo: not supported by this server", "echo", "unsupported_value")
    return out


def parse_completion(body: Any) -> dict[str, Any]:
    out = _common(body)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        if prompt is None:
            raise ApiError(400, "prompt: required", "prompt", "missing_field")
        raise _bad("prompt", "must be a string (or a list of one string)")
    out["prompt"] = prompt
    return out


ROLES = ("system", "developer", "user", "assistant", "tool")


def parse_chat(body: Any) -> dict[str, Any]:
    out = _common(body)
    messages = body.get("messages")
    if messages is None:
        raise ApiError(400, "messages: required", "messages", "missing_field")
    if not isinstance(messages, list) or not messages:
        raise _bad("messages", "must be a non-empty list of {role, content} objects")
    clean = []
    for i, m in enumerate(messages):
        at = f"messages[{i}]"
        if not isinstance(m, dict):
            raise _bad(at, "must be an object with role and content")
        role = m.get("role")
        if role not in ROLES:
            raise _bad(f"{at}.role", f"must be one of {', '.join(ROLES)}, got {role!r}")
        content = m.get("content")
        if isinstance(content, list):
            texts = []
            for j, part in enumerate(content):
                if (
                    not isinstance(part, dict)
                    or part.get("type") != "text"
                    or not isinstance(part.get("text"), str)
                ):
                    raise _bad(f"{at}.content[{j}]", "only text parts are supported")
                texts.append(part["text"])
            content = "".join(texts)
        if content is None and role == "assistant":
            content = ""
        if not isinstance(content, str):
            raise _bad(f"{at}.content", "must be a string or a list of text parts")
        clean.append({"role": "system" if role == "developer" else role, "content": content})
    out["messages"] = clean
    return out
