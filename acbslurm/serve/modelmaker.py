"""Small models made locally (nothing can come from a model hub): tests and ``--demo``.

A byte-level BPE tokenizer is trained with ``tokenizers`` on local text, a GPT-2 of
the given size is initialised randomly from a fixed seed and written with
``save_pretrained`` (``config.json``, ``model.safetensors``, tokenizer files), so the
workers load it through the same ``from_pretrained`` path a real model takes.
``make_whisper`` writes a Whisper the same way (random weights, the tokenizer with
Whisper's special tokens, its feature extractor): vLLM serves it on
``/v1/audio/transcriptions`` and ``/translations``. The demo on vLLM adds it and an
embedding model (a GPT-2 that vLLM turns into one: ``convert: embed``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from acbslurm.serve.engines import engine_kind
from acbslurm.values import frozen

CORPUS = """\
The broker lends GPUs to programs per request, not per job. A model holds its GPUs
only while it computes; its weights move to host memory when another model needs the
room and come back at the next grant, so no model pays a cold start. Slurm allocates
nodes and GPUs to jobs; a job may share its GPUs among many programs. Retrieval
augmented generation alternates a search over documents with a question to a model.
The quick brown fox jumps over the lazy dog. 0123456789 Hello, world! What is a GPU?
A graphics processing unit computes many things at once. Memory, bandwidth, latency.
"""

SPECIAL = ["<|endoftext|>", "<|pad|>"]


@frozen
class TinyShape:
    layers: int = 2
    width: int = 64
    heads: int = 2
    positions: int = 512
    vocab: int = 400


def _corpus_text() -> str:
    # Local text only: the corpus above plus this package's own sources.
    parts = [CORPUS * 4]
    for f in sorted(Path(__file__).parent.glob("*.py")):
        parts.append(f.read_text(errors="replace"))
    return "\n".join(parts)


def make_tokenizer(vocab: int) -> object:
    # torch, tokenizers, transformers: heavy, and only a demo model's making needs them
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus_text().splitlines(), trainer=trainer)
    eos, pad = SPECIAL
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=eos, bos_token=eos, pad_token=pad
    )


def make_model(dest: str | os.PathLike[str], shape: TinyShape | None = None, seed: int = 0) -> Path:
    """Write a random GPT-2 with a trained tokenizer to ``dest`` (atomically)."""
    # torch, tokenizers, transformers: heavy, and only a demo model's making needs them
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    shape = shape or TinyShape()

    out = Path(dest)
    tokenizer = make_tokenizer(shape.vocab)
    vocab = len(tokenizer)  # type: ignore[arg-type]
    config = GPT2Config(
        vocab_size=vocab,
        n_positions=shape.positions,
        n_embd=shape.width,
        n_layer=shape.layers,
        n_head=shape.heads,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=1,
    )
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(config)
    model.eval()
    return _save(out, model, tokenizer)


def make_whisper(dest: str | os.PathLike[str], seed: int = 0) -> Path:
    """Write a random tiny Whisper (one encoder and one decoder layer, width 64, 80
    mel bins, 30 s of audio per window) with a Whisper tokenizer trained on the local
    corpus and Whisper's feature extractor, to ``dest`` (atomically)."""
    # torch, tokenizers, transformers: heavy, and only a demo model's making needs them
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
        WhisperProcessor,
        WhisperTokenizerFast,
    )
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    out = Path(dest)
    eos = SPECIAL[0]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=[eos],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus_text().splitlines(), trainer=trainer)
    bpe = json.loads(tok.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in bpe["merges"]]
    tokenizer = WhisperTokenizerFast(vocab=bpe["vocab"], merges=merges)
    # What Whisper's prompts are made of (vLLM writes <|startoftranscript|><|en|>
    # <|transcribe|><|notimestamps|>), every language's token included.
    special = ["<|startoftranscript|>", *(f"<|{code}|>" for code in LANGUAGES)]
    special += ["<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>"]
    special += ["<|nospeech|>", "<|notimestamps|>"]
    tokenizer.add_special_tokens({"additional_special_tokens": special})
    processor = WhisperProcessor(
        feature_extractor=WhisperFeatureExtractor(feature_size=80), tokenizer=tokenizer
    )
    ids = tokenizer.convert_tokens_to_ids
    config = WhisperConfig(
        vocab_size=len(tokenizer),
        num_mel_bins=80,
        d_model=64,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        max_source_positions=1500,
        max_target_positions=448,
        pad_token_id=ids(eos),
        bos_token_id=ids(eos),
        eos_token_id=ids(eos),
        decoder_start_token_id=ids("<|startoftranscript|>"),
        begin_suppress_tokens=None,
        suppress_tokens=None,
    )
    torch.manual_seed(seed)
    model = WhisperForConditionalGeneration(config)
    model.eval()
    return _save(out, model, processor)


def _save(out: Path, *parts: Any) -> Path:
    """``parts`` (a model, its tokenizer or processor) saved into a new folder beside
    ``out``, then renamed over it: a reader never sees a half-written model."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for part in parts:
            part.save_pretrained(tmp)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


DEMO_SHAPES = {
    # Shaped like the ACB demo (A:4, B:4, C:8 on two 4-GPU servers): C is the big one.
    "model-a": (TinyShape(layers=2, width=128, heads=4), 4),
    "model-b": (TinyShape(layers=2, width=128, heads=4), 4),
    "model-c": (TinyShape(layers=4, width=192, heads=4), 8),
}
# With --engine vllm the demo also serves every other route vLLM has: embeddings (the
# GPT-2 as vLLM's embedding model) and audio (a Whisper), one device each.
DEMO_EMBED = ("model-embed", TinyShape())
DEMO_WHISPER = "model-whisper"
DEMO_VERSION = "1"


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "acbslurm" / "serve-demo" / f"v{DEMO_VERSION}"


def demo_models(root: Path | None = None) -> dict[str, tuple[Path, int]]:
    """The demo's models (made once, then reused from the cache): name -> (dir, devices)."""
    root = root or cache_dir()
    out: dict[str, tuple[Path, int]] = {}
    for i, (name, (shape, devices)) in enumerate(DEMO_SHAPES.items()):
        d = root / name
        if not (d / "config.json").is_file():
            make_model(d, shape, seed=i)
        out[name] = (d, devices)
    return out


def demo_extra_models(root: Path | None = None) -> dict[str, Path]:
    """The vLLM demo's embedding and Whisper models (made once, then reused)."""
    root = root or cache_dir()
    embed, whisper = root / DEMO_EMBED[0], root / DEMO_WHISPER
    if not (embed / "config.json").is_file():
        make_model(embed, DEMO_EMBED[1], seed=10)
    if not (whisper / "config.json").is_file():
        make_whisper(whisper, seed=11)
    return {DEMO_EMBED[0]: embed, DEMO_WHISPER: whisper}


def demo_extra_yaml(root: Path | None = None) -> list[str]:
    """The vLLM demo's models entries for the embedding and the Whisper model."""
    extra = demo_extra_models(root)
    return [
        f"  - name: {DEMO_EMBED[0]}",
        f"    path: {extra[DEMO_EMBED[0]]}",
        "    engine: vllm",
        "    headroom: 256K",
        "    engine_args: {runner: pooling, convert: embed}",
        f"  - name: {DEMO_WHISPER}",
        f"    path: {extra[DEMO_WHISPER]}",
        "    engine: vllm",
        "    headroom: 256K",
        "    max_tokens: 32",
        "    temperature: 0",
    ]


def demo_pool_yaml(
    root: Path | None = None, listen: str = "127.0.0.1:8000", engine: str = "builtin"
) -> str:
    """The demo's pool file (models made on first use under ``root``, default the cache);
    ``engine``: every model's (``serve --demo --engine vllm``, which adds an embedding
    and a Whisper model, and a tool-call parser to the chat models)."""
    models = demo_models(root)
    lines = [
        "# acbslurm serve --demo: models of 4, 4 and 8 devices (A:4, B:4, C:8) on 8 CPU stand-ins",
        f"listen: {listen}",
        "devices: cpu:8:1536K",
        "policy: quantum",
        "quantum: 1",
        "host_memory: 1G",
        "models:",
    ]
    for name, (path, devices) in models.items():
        lines += [
            f"  - name: {name}",
            f"    path: {path}",
            f"    devices: {devices}",
            "    max_tokens: 32",
            "    temperature: 0",
            "    headroom: 256K",
        ]
        if engine != "builtin":
            lines.append(f"    engine: {engine}")
        lines += [f"    {line}" for line in engine_kind(engine).demo_lines]
    if engine_kind(engine).demo_extras:
        lines += demo_extra_yaml(root)
    return "\n".join(lines) + "\n"
