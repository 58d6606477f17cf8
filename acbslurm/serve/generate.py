"""One request's decoding: prompt, KV cache, sampling, stop conditions, text deltas.

A turn steps every active request by one token in round robin, each with its own KV
cache and a forward pass of batch size 1: a request's tokens never depend on which
other requests share its turn, so greedy outputs are identical to the model served
alone (the acceptance test checks it). Padded batched kernels would be faster on a
GPU; they are not implemented (docs/serve.md).

The forward pass is a ``Forward``: the model in this process (``local_forward``), or
the leader of a worker group whose stages run in several processes
(``pipeline.Leader``, which also needs to hear when a request's KV cache is dropped:
``on_drop``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

# (token ids [1, T], the request's KV cache or None) -> (last position's logits, cache)
Forward = Callable[[torch.Tensor, Any], tuple[torch.Tensor, Any]]


def local_forward(model: Any) -> Forward:
    def forward(ids: torch.Tensor, past: Any) -> tuple[torch.Tensor, Any]:
        out = model(input_ids=ids, past_key_values=past, use_cache=True)
        return out.logits[0, -1], out.past_key_values

    return forward


@dataclass
class Params:
    max_tokens: int
    temperature: float
    top_p: float
    seed: int | None = None
    stop: tuple[str, ...] = ()


@dataclass
class Decoding:
    rid: str
    prompt_ids: list[int]
    params: Params
    eos_id: int | None
    arrived: float = field(default_factory=time.monotonic)
    past: Any = None
    out_ids: list[int] = field(default_factory=list)
    text: str = ""
    sent: int = 0  # characters of ``text`` already sent
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
            return self._flush()
        self.out_ids.append(token)
        self.text = tokenizer.decode(self.out_ids, skip_special_tokens=True)
        if self._cut_at_stop():
            self.finish_reason = "stop"
            return self._flush()
        if len(self.out_ids) >= self.params.max_tokens:
            self.finish_reason = "length"
            return self._flush()
        safe = self._safe_end()
        delta = self.text[self.sent : safe] if safe > self.sent else ""
        self.sent = max(self.sent, safe)
        return delta

    def _cut_at_stop(self) -> bool:
        """Cut ``text`` at the first stop string (in the order given) it contains; True if one."""
        for s in self.params.stop:
            at = self.text.find(s)
            if at >= 0:
                self.text = self.text[:at]
                return True
        return False

    def _safe_end(self) -> int:
        """How much of ``text`` may be sent: not a trailing partial UTF-8 sequence, nor
        text that may start a stop string."""
        safe = len(self.text)
        if self.text.endswith("\ufffd"):
            safe = len(self.text.rstrip("\ufffd"))
        for s in self.params.stop:
            for k in range(min(len(s) - 1, safe), 0, -1):
                if self.text[:safe].endswith(s[:k]):
                    safe -= k
                    break
        return safe

    def _flush(self) -> str:
        self.drop_cache()
        delta = self.text[self.sent :]
        self.sent = len(self.text)
        return delta

    def drop_cache(self) -> None:
        past, self.past = self.past, None
        if past is not None and self.on_drop is not None:
            self.on_drop(past)
