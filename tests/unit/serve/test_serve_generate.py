"""Incremental decoding (generate.Decoding): the streamed text is byte for byte a full
decode of the output tokens, on the project's small models, non-ASCII text included."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from acbslurm.serve.engines.builtin.decoding import Decoding, Params, local_forward

PROMPTS = ("Hello, world!", "Grüße aus Köln: 日本語のテキスト — ünïcödé ✓ 🚀", "ß")


@pytest.fixture(scope="module")
def model(tiny_models: dict[str, Path]) -> tuple[Any, Any]:
    path = tiny_models["model-a"]
    return AutoTokenizer.from_pretrained(path), AutoModelForCausalLM.from_pretrained(path).eval()


def _run(tok: Any, lm: Any, prompt: str, params: Params) -> tuple[Decoding, list[str]]:
    d = Decoding("r", list(tok(prompt).input_ids), params, tok.eos_token_id)
    deltas = []
    forward = local_forward(lm)
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        while not d.done:
            deltas.append(d.step(forward, torch.device("cpu"), tok))
    return d, deltas


def _full(tok: Any, ids: list[int]) -> str:
    return str(tok.decode(ids, skip_special_tokens=True))


@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("temperature", [0.0, 1.5])
def test_stream_equals_full_decode(model: tuple[Any, Any], prompt: str, temperature: float) -> None:
    tok, lm = model
    for seed in range(4 if temperature else 1):
        # sampled at a high temperature, the tiny vocabulary's single-byte tokens come
        # often: characters split over tokens, and bytes that never form one
        d, deltas = _run(tok, lm, prompt, Params(300, temperature, 1.0, seed=seed))
        full = _full(tok, d.out_ids)
        assert "".join(deltas) == d.text == full
        assert d.text.encode("utf-8", "surrogatepass") == full.encode("utf-8", "surrogatepass")


def test_split_characters_wait_for_their_bytes(model: tuple[Any, Any]) -> None:
    tok, _ = model
    ids = list(tok("日本 ✓ ok").input_ids)
    byte_ids = [i for i in ids if "\ufffd" in _full(tok, [i])]
    assert byte_ids, "the tiny tokenizer splits these characters into byte tokens"

    script = iter([*ids, tok.eos_token_id])
    vocab = len(tok)

    def forward(_ids: torch.Tensor, past: Any) -> tuple[torch.Tensor, Any]:
        logits = torch.zeros(vocab)
        logits[next(script)] = 1.0
        return logits, past

    d = Decoding("r", [0], Params(100, 0.0, 1.0), tok.eos_token_id)
    deltas = []
    while not d.done:
        deltas.append(d.step(forward, torch.device("cpu"), tok))
    assert "".join(deltas) == "日本 ✓ ok" and all("\ufffd" not in x for x in deltas)


@pytest.mark.parametrize("stop", [("ab",), ("e", "t"), ("the ", "\n"), ("日本",)])
def test_stop_strings_as_a_full_decode_finds_them(
    model: tuple[Any, Any], stop: tuple[str, ...]
) -> None:
    tok, lm = model
    for seed in range(3):
        params = Params(200, 1.2, 1.0, seed=seed, stop=stop)
        d, deltas = _run(tok, lm, PROMPTS[1], params)
        # the reference: a full decode after each token, cut at the first stop string
        # (in the order given) once one shows
        full = _full(tok, d.out_ids)
        hit = next((s for s in stop if s in full), None)
        if hit is None:
            assert d.text == full
        else:
            assert d.finish_reason == "stop" and d.text == full[: full.find(hit)]
            before = _full(tok, d.out_ids[:-1])
            assert not any(s in before for s in stop)  # it stopped at the first such token
        assert "".join(deltas) == d.text


class _Counting:
    """The tokenizer, noting the longest token list it was asked to decode."""

    def __init__(self, tok: Any) -> None:
        self.tok = tok
        self.longest = 0

    def __call__(self, text: str) -> Any:
        return self.tok(text)

    @property
    def eos_token_id(self) -> int:
        return int(self.tok.eos_token_id)

    def decode(self, ids: list[int], **kw: Any) -> str:
        self.longest = max(self.longest, len(ids))
        return str(self.tok.decode(ids, **kw))


def _replay(tok: Any, tokens: list[int], params: Params) -> tuple[Decoding, list[str]]:
    script = iter(tokens)
    vocab = len(getattr(tok, "tok", tok))

    def forward(_ids: torch.Tensor, past: Any) -> tuple[torch.Tensor, Any]:
        logits = torch.zeros(vocab)
        logits[next(script)] = 1.0
        return logits, past

    d = Decoding("r", [0], params, tok.eos_token_id)
    deltas = []
    while not d.done:
        deltas.append(d.step(forward, torch.device("cpu"), tok))
    return d, deltas


def test_each_step_decodes_a_few_tokens_only(model: tuple[Any, Any]) -> None:
    tok, lm = model
    counting = _Counting(tok)
    d, _ = _run(counting, lm, PROMPTS[1], Params(400, 1.5, 1.0, seed=1))
    assert len(d.out_ids) > 200 and counting.longest <= 16  # not the whole output


def test_bytes_that_never_form_a_character(model: tuple[Any, Any]) -> None:
    # Model C of the tests loops greedily on one lead byte (0xE6): every decode ends
    # in U+FFFD. The text must still stream, and each step stay small.
    tok, _ = model
    lead = tok.convert_tokens_to_ids("æ")  # byte-level alphabet: the byte 0xE6
    assert _full(tok, [lead, lead]) == "\ufffd\ufffd"
    tokens = [lead] * 200 + list(tok(" ok ✓").input_ids) + [lead] * 5
    counting = _Counting(tok)
    d, deltas = _replay(counting, tokens, Params(len(tokens), 0.0, 1.0))
    assert "".join(deltas) == d.text == _full(tok, tokens)
    assert sum(1 for x in deltas[:200] if x) > 20 and counting.longest <= 16
