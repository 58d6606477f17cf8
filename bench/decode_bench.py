"""Tokens per second of the built-in engine's text decoding, before and after it became
incremental.

    python bench/decode_bench.py [--baseline REV] [--tokens 1000,4000] [--repeat 3]

``--baseline`` (a git revision, default d6930eb: the last one that re-decoded the whole
output at every token) supplies the old decoder (then ``acbslurm/serve/generate.py``),
loaded beside the current one. A tiny GPT-2 with 4096 positions and the project's local tokenizer
(``modelmaker``, made in a temporary folder) samples the longest output once at
temperature 1.5 from a non-ASCII prompt (its 400-token vocabulary gives many
single-byte tokens: characters split over tokens). Then both ``Decoding`` classes:

- **text only**: the recorded tokens replayed through ``Decoding.step`` by a forward
  that returns them (what the detokenizing and the stop-string checks cost, with one
  stop string that never occurs);
- **end to end**: the model itself, greedy, each step a real forward pass.

It prints tokens/s per output length, and whether the old and new texts are identical
(they must be: exit 1 otherwise).
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from acbslurm.serve.modelproc import prepare_model_process

prepare_model_process()  # quiet transformers, before it is imported

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from acbslurm.serve.engines.builtin import decoding as generate  # noqa: E402
from acbslurm.serve.modelmaker import TinyShape, make_model  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PROMPT = "Grüße aus Köln — 日本語のテキスト: "
STOP = ("never-in-the-output",)


def baseline(rev: str, folder: Path) -> ModuleType:
    src = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{rev}:acbslurm/serve/generate.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = folder / "generate_baseline.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("generate_baseline", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def scripted(tokens: list[int], vocab: int) -> Any:
    """A forward that returns ``tokens`` one by one (as one-hot logits)."""
    it = iter(tokens)

    def forward(_ids: torch.Tensor, past: Any) -> tuple[torch.Tensor, Any]:
        logits = torch.zeros(vocab)
        logits[next(it)] = 1.0
        return logits, past

    return forward


def run(
    mod: ModuleType, forward: Any, prompt: list[int], params: Any, tok: Any
) -> tuple[float, str, int]:
    """(seconds, text, tokens) of one request decoded to its end."""
    d = mod.Decoding("r", prompt, params, None)
    parts = []
    t0 = time.perf_counter()
    with torch.inference_mode():
        while not d.done:
            parts.append(d.step(forward, torch.device("cpu"), tok))
    took = time.perf_counter() - t0
    assert "".join(parts) == d.text
    return took, d.text, len(d.out_ids)


def record(lm: Any, prompt: list[int], n: int, tok: Any) -> list[int]:
    d = generate.Decoding("r", prompt, generate.Params(n, 1.5, 1.0, seed=0), None)
    forward = generate.local_forward(lm)
    with torch.inference_mode():
        while not d.done:
            d.step(forward, torch.device("cpu"), tok)
    return d.out_ids


def best(
    mod: ModuleType, make_forward: Any, prompt: list[int], n: int, repeat: int, tok: Any
) -> tuple[float, str]:
    params = mod.Params(n, 0.0, 1.0, stop=STOP)
    runs = [run(mod, make_forward(), prompt, params, tok) for _ in range(repeat)]
    assert all(r[2] == n for r in runs), "the output ended early"
    return n / min(r[0] for r in runs), runs[0][1]


def line(n: int, before: float, after: float, same: bool) -> None:
    print(
        f"  {n:5d} tokens: before {before:9.0f}  after {after:9.0f}  "
        f"x{after / before:6.1f}  identical {same}"
    )


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--baseline", default="d6930eb")
    p.add_argument("--tokens", default="500,1000,2000,4000")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--end-to-end", default="1000,4000", help="lengths to run with the model")
    args = p.parse_args()
    lengths = [int(x) for x in args.tokens.split(",")]
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        old = baseline(args.baseline, Path(tmp))
        path = make_model(Path(tmp) / "m", TinyShape(positions=4200), seed=0)
        tok = AutoTokenizer.from_pretrained(path)
        lm = AutoModelForCausalLM.from_pretrained(path).eval()
        prompt = list(tok(PROMPT).input_ids)
        tokens = record(lm, prompt, max(lengths), tok)
        vocab = len(tok)
        print(f"1 torch thread; baseline {args.baseline}; prompt {PROMPT!r}")
        print(f"recorded {len(tokens)} sampled tokens; {len(tok.decode(tokens))} characters")
        same = True
        print("\ntext only (recorded tokens replayed): tokens/s, best of", args.repeat)
        for n in lengths:
            mk = lambda: scripted(tokens, vocab)  # noqa: E731
            t_old, x_old = best(old, mk, prompt, n, args.repeat, tok)
            t_new, x_new = best(generate, mk, prompt, n, args.repeat, tok)
            same &= x_old == x_new
            line(n, t_old, t_new, x_old == x_new)
        print("\nend to end (the model, greedy): tokens/s, best of 1")
        for n in [int(x) for x in args.end_to_end.split(",") if x]:
            mk = lambda: generate.local_forward(lm)  # noqa: E731
            t_old, x_old = best(old, mk, prompt, n, 1, tok)
            t_new, x_new = best(generate, mk, prompt, n, 1, tok)
            same &= x_old == x_new
            line(n, t_old, t_new, x_old == x_new)
    print("\nold and new texts identical:", same)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
