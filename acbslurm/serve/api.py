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
import re
from collections.abc import Mapping
from typing import Any

from acbslurm.errors import short_repr
from acbslurm.values import mutable


@mutable
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
        raise _bad(key, f"must be a number, got {short_repr(v)}")
    if not low <= v <= high:
        raise _bad(key, f"must be between {low:g} and {high:g}, got {v}")
    return float(v)


def _int(body: dict[str, Any], key: str, low: int) -> int | None:
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise _bad(key, f"must be an integer, got {short_repr(v)}")
    if v < low:
        raise _bad(key, f"must be at least {low}, got {v}")
    return v


def _model_name(body: dict[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(
            400, "model: required (a model name from GET /v1/models)", "model", "missing_field"
        )
    return model


# What torch.Generator.manual_seed takes (a 64-bit value, signed or not): a seed
# outside it would raise in the worker, not here.
SEED_MIN, SEED_MAX = -(2**63), 2**64 - 1
MAX_STOP_CHARS = 256  # each stop string is looked for at every token: keep that cheap


def _seed(body: dict[str, Any]) -> int | None:
    seed = body.get("seed")
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise _bad("seed", f"must be an integer, got {short_repr(seed)}")
    if not SEED_MIN <= seed <= SEED_MAX:
        raise _bad("seed", f"must be between -2**63 and 2**64-1, got {short_repr(seed)}")
    return seed


def _stops(body: dict[str, Any]) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        stops: list[str] = []
    elif isinstance(stop, str):
        stops = [stop]
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop) and len(stop) <= 4:
        stops = list(stop)
    else:
        raise _bad("stop", "must be a string or a list of up to 4 strings")
    _check_stop_lengths(stops, one=isinstance(stop, str))
    return [s for s in stops if s]


def _check_stop_lengths(stops: list[str], one: bool) -> None:
    """Each stop string at most MAX_STOP_CHARS; the error names ``stop`` or ``stop[i]``."""
    for i, s in enumerate(stops):
        if len(s) > MAX_STOP_CHARS:
            at = "stop" if one else f"stop[{i}]"
            raise _bad(at, f"at most {MAX_STOP_CHARS} characters, got {len(s)}")


def _stream(body: dict[str, Any]) -> bool:
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise _bad("stream", f"must be true or false, got {short_repr(stream)}")
    return stream


# Fields that would change the result and are not implemented: refused, not ignored.
UNSUPPORTED = ("logprobs", "top_logprobs", "tools", "functions", "logit_bias", "suffix")


def _refuse_unsupported(body: dict[str, Any]) -> None:
    for key in ("frequency_penalty", "presence_penalty"):
        v = _number(body, key, -2.0, 2.0)
        if v:
            raise ApiError(400, f"{key}: not supported (only 0)", key, "unsupported_value")
    for key in UNSUPPORTED:
        if body.get(key) not in (None, False, [], {}):
            raise ApiError(400, f"{key}: not supported by this server", key, "unsupported_value")
    if body.get("echo"):
        raise ApiError(400, "echo: not supported by this server", "echo", "unsupported_value")


# JSON may carry "\\ud800" (and json.loads lets raw surrogate bytes through too): such
# text cannot be encoded, tokenized or even written back in an error message.
_SURROGATE = re.compile("[\\ud800-\\udfff]")


def _check_unicode(body: Any) -> None:
    """A 400 naming the first field whose text (or one of whose keys) holds a lone
    surrogate. A loop, not recursion: json.loads nests as deep as recursion allows."""
    todo: list[tuple[str, Any]] = [("", body)]
    while todo:
        at, v = todo.pop()
        if isinstance(v, str):
            _check_text(at, v, at)
        elif isinstance(v, dict):
            for k, item in v.items():
                # a bad key is named by where it is: the key itself cannot be written
                _check_text(f"{at or 'the body'}: a key", k, at or None)
                todo.append((f"{at}.{k}" if at else k, item))
        elif isinstance(v, list):
            todo.extend((f"{at}[{i}]", item) for i, item in enumerate(v))


def _check_text(where: str, text: str, param: str | None) -> None:
    m = _SURROGATE.search(text)
    if m is not None:
        raise ApiError(
            400,
            f"{where}: not valid Unicode: a lone surrogate (U+{ord(m.group()):04X}) at "
            f"character {m.start()}",
            param=param,
            code="invalid_unicode",
        )


def _common(body: dict[str, Any]) -> dict[str, Any]:
    """The fields of both endpoints, checked in this order (the first error is reported)."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
    _check_unicode(body)
    out: dict[str, Any] = {
        "model": _model_name(body),
        # max_completion_tokens is OpenAI's newer name: it comes first
        "max_tokens": _int(body, "max_completion_tokens", 1) or _int(body, "max_tokens", 1),
        "temperature": _number(body, "temperature", 0.0, 2.0),
        "top_p": _number(body, "top_p", 0.0, 1.0),
        "seed": _seed(body),
    }
    if _int(body, "n", 1) not in (None, 1):
        raise ApiError(400, "n: only n=1 is supported", "n", "unsupported_value")
    out["stop"] = _stops(body)
    out["stream"] = _stream(body)
    opts = body.get("stream_options") or {}
    if not isinstance(opts, dict):
        raise _bad("stream_options", "must be an object")
    out["include_usage"] = bool(opts.get("include_usage", False))
    _refuse_unsupported(body)
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


def _content(at: str, content: Any) -> Any:
    """A list of text parts joined into one string; anything else as it is."""
    if not isinstance(content, list):
        return content
    texts = []
    for j, part in enumerate(content):
        if (
            not isinstance(part, dict)
            or part.get("type") != "text"
            or not isinstance(part.get("text"), str)
        ):
            raise _bad(f"{at}.content[{j}]", "only text parts are supported")
        texts.append(part["text"])
    return "".join(texts)


def _message(i: int, m: Any) -> dict[str, str]:
    at = f"messages[{i}]"
    if not isinstance(m, dict):
        raise _bad(at, "must be an object with role and content")
    role = m.get("role")
    if role not in ROLES:
        raise _bad(f"{at}.role", f"must be one of {', '.join(ROLES)}, got {short_repr(role)}")
    content = _content(at, m.get("content"))
    if content is None and role == "assistant":
        content = ""
    if not isinstance(content, str):
        raise _bad(f"{at}.content", "must be a string or a list of text parts")
    return {"role": "system" if role == "developer" else role, "content": content}


def parse_chat(body: Any) -> dict[str, Any]:
    out = _common(body)
    messages = body.get("messages")
    if messages is None:
        raise ApiError(400, "messages: required", "messages", "missing_field")
    if not isinstance(messages, list) or not messages:
        raise _bad("messages", "must be a non-empty list of {role, content} objects")
    out["messages"] = [_message(i, m) for i, m in enumerate(messages)]
    return out


def prompt_chars(work: Mapping[str, Any]) -> int:
    """Characters of a request's prompt, or of its messages' contents (``work``: what
    the gateway sends the worker)."""
    if "messages" not in work:
        return len(str(work.get("prompt", "")))
    return sum(len(str(m.get("content", ""))) for m in work["messages"])


def check_prompt_size(work: Mapping[str, Any], max_chars: int, max_context: int) -> None:
    """A 400 for a prompt too long to fit the context whatever its tokens, before it is
    tokenized: ``max_chars`` is the context times the longest token's characters."""
    field = "messages" if "messages" in work else "prompt"
    _check_chars(prompt_chars(work), field, max_chars, max_context)


def _check_chars(n: int, field: str, max_chars: int, max_context: int) -> None:
    if max_chars and n > max_chars:
        raise ApiError(
            400,
            f"{field}: {n} characters is more than this model takes ({max_chars}: its "
            f"context of {max_context} tokens, each at most {max_chars // max_context} "
            "characters). Shorten the prompt.",
            field,
            "context_length_exceeded",
        )


# -- engine: vllm: the body goes to vLLM whole ----------------------------------------


def parse_passthrough(
    body: Any, chat: bool = False, fields: tuple[str, ...] = (), per_item: bool = False
) -> dict[str, Any]:
    """The checks acbslurm keeps for a model on vLLM, whose server validates the rest
    (sampling values, ``n``, ``logprobs``, penalties, ``response_format``, tools, ...):
    a JSON object, valid Unicode (a lone surrogate cannot even be written back in an
    error), a model name, ``stream`` a boolean (the gateway must know whether to
    stream) and the prompt's (or messages') size in characters, for the bound checked
    before anything is tokenized (``fields``: the fields that hold it, on the other
    routes: ``input``, a response's ``instructions``; ``per_item``: each item of a
    list is a prompt of its own, as embeddings' inputs are, and the longest counts).
    Returns ``model``, ``stream`` and ``chars``."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
    _check_unicode(body)
    fields = fields or (("messages",) if chat else ("prompt",))
    model, stream = _model_name(body), _stream(body)
    value = body.get(fields[0])
    if per_item and isinstance(value, list) and value and not isinstance(value[0], int):
        chars = max(text_chars(item) for item in value)  # a list of token ids is one prompt
    else:
        chars = sum(text_chars(body.get(f)) for f in fields)
    return {"model": model, "stream": stream, "field": fields[0], "chars": chars}


def text_chars(value: Any) -> int:
    """Characters of every string inside ``value`` (a prompt, messages and their parts),
    and one per integer (a token id). A loop, not recursion (see _check_unicode)."""
    n, todo = 0, [value]
    while todo:
        v = todo.pop()
        if isinstance(v, str):
            n += len(v)
        elif isinstance(v, bool) or v is None:
            continue
        elif isinstance(v, int):
            n += 1
        elif isinstance(v, dict):
            todo.extend(v.values())
        elif isinstance(v, list):
            todo.extend(v)
    return n


def check_passthrough_size(checked: dict[str, Any], max_chars: int, max_context: int) -> None:
    """``check_prompt_size`` for a body going to vLLM (``parse_passthrough``'s result)."""
    _check_chars(checked["chars"], checked["field"], max_chars, max_context)
