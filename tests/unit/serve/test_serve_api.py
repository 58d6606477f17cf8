"""Request bodies: every bad field is named (OpenAI's ``param``)."""

from __future__ import annotations

from typing import Any

import pytest

from acbslurm.serve.api import ApiError, parse_chat, parse_completion


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
