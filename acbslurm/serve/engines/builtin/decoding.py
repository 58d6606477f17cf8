"""One request's decoding: prompt, KV cache, sampling, stop conditions, text deltas.

A turn steps every active request by one token in round robin, each with its own KV
cache and a forward pass of batch size 1: a request's tokens never depend on which
other requests share its turn, so greedy outputs are identical to the model served
alone (the acceptance test checks it). Padded batched kernels would be faster on a
GPU; they are not implemented (docs/serve.md).

The forward pass is a ``Forward``: the model in this process (``local_forward``), or
the leader of a worker group whose stages run in several processes
(``group.Leader``, which also needs to hear when a request's KV cache is dropped:
``on_drop``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from acbslurm.values import field, mutable

PENDING = 6  # tokens still ending in U+FFFD after which a split is looked for

# (token ids [1, T], the request's KV cache or None) -> (last position's logits, cache)
Forward = Callable[[torch.Tensor, Any], tuple[torch.Tensor, Any]]


def local_forward(model: Any) -> Forward:
    def forward(ids: torch.Tensor, past: Any) -> tuple[torch.Tensor, Any]:
        out = model(input_ids=ids, past_key_values=past, use_cache=True)
        return out.logits[0, -1], out.past_key_values

    return forward


@mutable
class Params:
    max_tokens: int
    temperature: float
    top_p: float
    seed: int | None = None
    stop: tuple[str, ...] = ()


@mutable
class Decoding:
    """One request's decoding state.

    The text is decoded incrementally, as vLLM's and transformers' streaming
    detokenizers do: each step decodes only the tokens since ``prefix`` (the tokens
    of the last confirmed piece, decoded again so that a tokenizer that treats a
    text's first token differently, e.g. dropping its leading space, does so in both
    decodes) and keeps what follows that piece's text. A piece ending in U+FFFD (a
    token that ends inside a UTF-8 character) is not confirmed until the character is
    complete. ``text`` then always equals a decode of all of ``out_ids`` (tested), at a
    cost per token that does not grow with the output: re-decoding everything at each
    token made a request O(n^2).
    """

    rid: str
    prompt_ids: list[int]
    params: Params
    eos_id: int | None
    arrived: float = field(default_factory=time.monotonic)
    past: Any = None
    out_ids: list[int] = field(default_factory=list)
    text: str = ""  # the confirmed text: a decode of out_ids[:read]
    sent: int = 0  # characters of ``text`` already sent
    prefix: int = 0  # out_ids[prefix:read] is the last confirmed piece
    read: int = 0
    finish_reason: str = ""
    cancelled: bool = False
    first_token_at: float = 0.0
    generator: torch.Generator | None = None
    timing: dict[str, float] = field(default_factory=dict)
    on_drop: Callable[[Any], None] | None = None  # told when ``past`` is dropped

    def __post_init__(self) -> None:
        if self.params.temperature > 0:
            self.generator = torch.Generator()
            if self.params.seed is not None:
                self.generator.manual_seed(self.params.seed)
            else:
                self.generator.seed()

    @property
    def done(self) -> bool:
        return bool(self.finish_reason) or self.cancelled

    def pick(self, logits: torch.Tensor) -> int:
        p = self.params
        if p.temperature <= 0:
            return int(torch.argmax(logits).item())
        probs = torch.softmax(logits.float() / p.temperature, dim=-1)
        if p.top_p < 1.0:
            sorted_p, order = torch.sort(probs, descending=True)
            keep = torch.cumsum(sorted_p, dim=-1) - sorted_p < p.top_p
            keep[0] = True
            probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_p[keep])
        return int(torch.multinomial(probs, 1, generator=self.generator).item())

    # complexity: one token's step of the decoder's state machine (end of sequence,
    # stop string, length, pending bytes, confirmed text), each case a return; the cases
    # only read clearly in the order they are decided.
    def step(self, forward: Forward, device: torch.device, tokenizer: Any) -> str:
        """Compute one token; returns the new text (may be empty while bytes are pending)."""
        if self.past is None:
            ids = torch.tensor([self.prompt_ids], dtype=torch.long, device=device)
        else:
            ids = torch.tensor([[self.out_ids[-1]]], dtype=torch.long, device=device)
        logits, self.past = forward(ids, self.past)
        token = self.pick(logits.to("cpu"))
        if not self.first_token_at:
            self.first_token_at = time.monotonic()
        if self.eos_id is not None and token == self.eos_id:
            self.finish_reason = "stop"
            return self._flush(self._pending(tokenizer))
        self.out_ids.append(token)
        new = self._pending(tokenizer)
        if self._cut_at_stop(new):
            self.finish_reason = "stop"
            return self._flush("")
        if len(self.out_ids) >= self.params.max_tokens:
            self.finish_reason = "length"
            return self._flush(new)
        if new and not new.endswith("\ufffd"):
            self._confirm(new, len(self.out_ids))
        elif len(self.out_ids) - self.read > PENDING:
            self._confirm_before_tail(tokenizer, new)
        safe = self._safe_end()
        delta = self.text[self.sent : safe] if safe > self.sent else ""
        self.sent = max(self.sent, safe)
        return delta

    def _pending(self, tokenizer: Any) -> str:
        """The text of the tokens after ``read`` (it may end in U+FFFD, a character whose
        bytes are not all there yet)."""
        return self._after(tokenizer, self.prefix, self.read, len(self.out_ids))

    def _after(self, tokenizer: Any, start: int, mid: int, end: int) -> str:
        """The text of tokens ``[mid, end)``: of ``[start, end)`` after that of
        ``[start, mid)``."""
        if mid == end:
            return ""
        window = tokenizer.decode(self.out_ids[start:end], skip_special_tokens=True)
        if start == mid:
            return str(window)
        head = tokenizer.decode(self.out_ids[start:mid], skip_special_tokens=True)
        return str(window[len(head) :])

    def _confirm(self, new: str, end: int) -> None:
        self.text += new
        self.prefix, self.read = self.read, end

    def _confirm_before_tail(self, tokenizer: Any, new: str) -> None:
        """Tokens that keep ending in U+FFFD (bytes that never form a character: a
        model looping on a lead byte) would make the pending window, and each step's
        decode, grow without end. Confirm the tokens before the last three (an
        unfinished character has at most 3 bytes, so at most 3 tokens) at the latest
        split where decoding on both sides of it gives the same text as decoding
        across it: no character, nor run of bad bytes, straddles it, and only the
        bytes after it can still change."""
        end = len(self.out_ids)
        for split in range(end - 3, max(self.read, end - 3 - PENDING), -1):
            piece = self._after(tokenizer, self.prefix, self.read, split)
            rest = self._after(tokenizer, self.read, split, end)
            if piece + rest == new:
                self._confirm(piece, split)
                return

    def _cut_at_stop(self, new: str) -> bool:
        """Cut the text at the first stop string (in the order given) that the text and
        ``new`` contain; True if one. Earlier steps found none in ``text``, so only
        where ``new`` begins, less a stop string's length, is searched."""
        for s in self.params.stop:
            start = max(0, len(self.text) - len(s) + 1)
            at = (self.text[start:] + new).find(s)
            if at >= 0:
                self.text = (self.text + new)[: start + at]
                return True
        return False

    def _safe_end(self) -> int:
        """How much of ``text`` may be sent: not text that may start a stop string."""
        safe = len(self.text)
        for s in self.params.stop:
            for k in range(min(len(s) - 1, safe), 0, -1):
                if self.text.endswith(s[:k], 0, safe):
                    safe -= k
                    break
        return safe

    def _flush(self, new: str) -> str:
        """The request is over: ``new`` (the pending text, U+FFFD and all, as a full
        decode has it) joins the text, and what was not sent yet is returned."""
        self.drop_cache()
        self.text += new
        delta = self.text[self.sent :]
        self.sent = len(self.text)
        return delta

    def drop_cache(self) -> None:
        past, self.past = self.past, None
        if past is not None and self.on_drop is not None:
            self.on_drop(past)
