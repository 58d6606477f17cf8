"""Request bodies: every bad field is named (OpenAI's ``param``)."""

from __future__ import annotations

from typing import Any

import pytest

from acbslurm.serve.api import (
    ApiError,
    check_passthrough_size,
    parse_chat,
    parse_completion,
    parse_passthrough,
)


def _err(fn: Any, body: Any) -> ApiError:
    with pytest.raises(ApiError) as info:
        fn(body)
    assert info.value.status == 400
    return info.value


def test_completion_ok() -> None:
    out = parse_completion(
        {"model": "m", "prompt": ["hi"], "max_tokens": 3, "stop": "x", "stream": True}
    )
    assert (
        out["prompt"] == "hi" and out["stop"] == ["x"] and out["stream"] and out["max_tokens"] == 3
    )


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": "x"}, "model"),
        ({"model": "m"}, "prompt"),
        ({"model": "m", "prompt": 5}, "prompt"),
        ({"model": "m", "prompt": "x", "max_tokens": 0}, "max_tokens"),
        ({"model": "m", "prompt": "x", "max_tokens": "3"}, "max_tokens"),
        ({"model": "m", "prompt": "x", "temperature": 3}, "temperature"),
        ({"model": "m", "prompt": "x", "top_p": -1}, "top_p"),
        ({"model": "m", "prompt": "x", "n": 2}, "n"),
        ({"model": "m", "prompt": "x", "stop": [1]}, "stop"),
        ({"model": "m", "prompt": "x", "stream": "yes"}, "stream"),
        ({"model": "m", "prompt": "x", "seed": 1.5}, "seed"),
        # torch's generators take 64 bits: a bigger seed killed the worker's thread
        ({"model": "m", "prompt": "x", "seed": 10**30}, "seed"),
        ({"model": "m", "prompt": "x", "seed": 2**64}, "seed"),
        ({"model": "m", "prompt": "x", "seed": -(2**63) - 1}, "seed"),
        ({"model": "m", "prompt": "x", "temperature": float("nan")}, "temperature"),
        ({"model": "m", "prompt": "x", "top_p": 1.5}, "top_p"),
        ({"model": "m", "prompt": "x", "n": 10**30}, "n"),
        ({"model": "m", "prompt": "x", "stop": ["a"] * 5}, "stop"),
        ({"model": "m", "prompt": "x", "stop": "s" * 257}, "stop"),
        ({"model": "m", "prompt": "x", "stop": ["a", "s" * 257]}, "stop[1]"),
        ({"model": "m", "prompt": "x\ud800"}, "prompt"),
        ({"model": "m", "prompt": ["x\udfff"]}, "prompt[0]"),
        ({"model": "m", "prompt": "x", "stop": ["a", "\udc00"]}, "stop[1]"),
        ({"model": "m", "prompt": "x", "logprobs": 2}, "logprobs"),
    ],
)
def test_completion_bad_field(body: dict[str, Any], param: str) -> None:
    assert _err(parse_completion, body).param == param


def test_chat() -> None:
    out = parse_chat(
        {
            "model": "m",
            "messages": [
                {"role": "developer", "content": "be brief"},
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                },
            ],
            "max_completion_tokens": 4,
        }
    )
    assert out["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "ab"},
    ]
    assert out["max_tokens"] == 4
    assert _err(parse_chat, {"model": "m"}).param == "messages"
    assert _err(parse_chat, {"model": "m", "messages": []}).param == "messages"
    assert (
        _err(parse_chat, {"model": "m", "messages": [{"role": "x", "content": "a"}]}).param
        == "messages[0].role"
    )
    assert _err(parse_chat, {"model": "m", "messages": [{"role": "user", "content": 3}]}).param == (
        "messages[0].content"
    )
    assert _err(parse_chat, []).code == "invalid_json"


def test_seed_range_and_clean_messages() -> None:
    for seed in (0, -(2**63), 2**64 - 1):
        assert parse_completion({"model": "m", "prompt": "x", "seed": seed})["seed"] == seed
    e = _err(parse_completion, {"model": "m", "prompt": "x", "seed": 10**30})
    assert e.code == "invalid_value" and "between -2**63 and 2**64-1" in e.message
    # a huge wrong value is quoted clipped, not whole
    e = _err(parse_completion, {"model": "m", "prompt": "x", "max_tokens": "9" * 100_000})
    assert e.param == "max_tokens" and len(e.message) < 300


def test_lone_surrogate_is_named_and_never_quoted() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "ok \ud800 x"}]}
    e = _err(parse_chat, body)
    assert (e.param, e.code, e.type) == (
        "messages[0].content",
        "invalid_unicode",
        "invalid_request_error",
    )
    assert e.message.startswith("messages[0].content: not valid Unicode") and "U+D800" in e.message
    e = _err(parse_completion, {"model": "m\udc00", "prompt": "x"})
    assert e.param == "model"
    e = _err(parse_completion, {"model": "m", "prompt": "x", "user": {"\ud800": 1}})
    assert e.param == "user" and "a key" in e.message
    for err in (e, _err(parse_chat, body)):
        err.message.encode()  # writable as UTF-8: no surrogate in it


def test_prompt_size_bound() -> None:
    from acbslurm.serve.api import check_prompt_size

    check_prompt_size({"prompt": "x" * 100}, 100, 10)
    check_prompt_size({"prompt": "x" * 10**6}, 0, 0)  # no worker ready yet: not known
    with pytest.raises(ApiError) as info:
        check_prompt_size({"prompt": "x" * 101}, 100, 10)
    e = info.value
    assert (e.status, e.param, e.code) == (400, "prompt", "context_length_exceeded")
    assert "101 characters" in e.message and "(100:" in e.message and "10 tokens" in e.message
    with pytest.raises(ApiError) as info:
        check_prompt_size({"messages": [{"role": "user", "content": "x" * 60}] * 2}, 100, 10)
    assert info.value.param == "messages"


def test_passthrough_keeps_only_acbslurms_checks() -> None:
    """engine: vllm: what vLLM validates is not checked here (n, logprobs, penalties,
    any sampling value, token-id prompts); acbslurm's own checks stay."""
    body = {
        "model": "m",
        "prompt": [[5, 6, 7], "abc"],
        "n": 3,
        "logprobs": 5,
        "presence_penalty": 1.5,
        "temperature": -1,
        "seed": 10**30,
        "response_format": {"type": "json_object"},
        "stream": True,
    }
    out = parse_passthrough(body, chat=False)
    assert out == {"model": "m", "stream": True, "field": "prompt", "chars": 6}
    chat = {
        "model": "m",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    }
    assert parse_passthrough(chat, chat=True)["chars"] == len("user") + len("text") + len("hi")
    for bad, code in (
        ([], "invalid_json"),
        ({"prompt": "x"}, "missing_field"),
        ({"model": "m", "prompt": "x", "stream": "yes"}, "invalid_value"),
        ({"model": "m", "prompt": "a\ud800"}, "invalid_unicode"),
    ):
        with pytest.raises(ApiError) as info:
            parse_passthrough(bad, chat=False)
        assert info.value.status == 400 and info.value.code == code, bad
    checked = parse_passthrough({"model": "m", "prompt": "x" * 101}, chat=False)
    with pytest.raises(ApiError) as info:
        check_passthrough_size(checked, 100, 10)
    assert info.value.code == "context_length_exceeded" and info.value.param == "prompt"
    check_passthrough_size(parse_passthrough({"model": "m", "prompt": "x" * 100}, False), 100, 10)
