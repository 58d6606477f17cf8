"""Helpers shared by the serve tests that drive a real pool."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
import warnings
from pathlib import Path
from typing import Any

from acbslurm.serve.runner import PoolServer


def openai_client(server: PoolServer, timeout: float = 60) -> Any:
    """The official client of ``server``'s pool (no key, no retries: a test sees every
    answer as it came)."""
    import openai

    return openai.OpenAI(
        base_url=f"http://127.0.0.1:{server.port}/v1",
        api_key="none",
        max_retries=0,
        timeout=timeout,
    )


def _get(server: PoolServer, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{path}", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def reference(path: Path, prompt: str, max_tokens: int) -> str:
    """The model served alone: the same decoding, in this process, one request at a time."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from acbslurm.serve.engines.builtin.decoding import Decoding, Params, local_forward

    tok = AutoTokenizer.from_pretrained(path)
    forward = local_forward(AutoModelForCausalLM.from_pretrained(path).eval())
    d = Decoding("r", list(tok(prompt).input_ids), Params(max_tokens, 0.0, 1.0), tok.eos_token_id)
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # transformers renames past_key_values
        while not d.done:
            d.step(forward, torch.device("cpu"), tok)
    return d.text


def _metric(text: str, name: str, model: str, extra: str = "") -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and f'model="{model}"' in line and extra in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def long_request_in_flight(
    client: Any, model: str, handle: Any
) -> tuple[threading.Thread, list[Any]]:
    """A 450-token completion of ``model`` on a thread, returned once ``handle``'s worker
    has it and is decoding: the thread, and the list its outcome lands in ("answered",
    or the ``openai.APIStatusError``)."""
    import openai

    outcome: list[Any] = []

    def long_request() -> None:
        try:
            client.completions.create(model=model, prompt="Hello", max_tokens=450)
            outcome.append("answered")
        except openai.APIStatusError as exc:
            outcome.append(exc)

    before = handle.deltas
    t = threading.Thread(target=long_request)
    t.start()
    # Decoding: the worker has sent text of it (450 tokens take far longer than one).
    deadline = time.monotonic() + 30
    while not (handle.pending and handle.deltas > before):
        assert time.monotonic() < deadline, "the request was not decoded within 30 s"
        assert t.is_alive(), f"the request ended before the test hurt its worker: {outcome}"
        time.sleep(0.01)
    return t, outcome
