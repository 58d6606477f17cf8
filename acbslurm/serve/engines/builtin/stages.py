"""One pipeline stage of a Hugging Face causal LM: a contiguous run of its blocks.

A model served by ``procs: N`` worker processes is cut into N stages: stage 0 runs
the embeddings and the first blocks, the last stage the remaining blocks, the final
norm and the head; the hidden states between them are passed on by ``group``.
Each process loads the model through the same ``from_pretrained`` path as a model
served whole, then drops what its stage does not run (the weights stay memory-mapped
until ``Residency`` copies the kept ones, so the dropped ones are never read).

The stage still runs the model's own ``forward`` (masks, rotary or absolute
positions, KV cache all as Hugging Face computes them), with three changes:

- the block list is cut to the stage's blocks, renumbered from 0 (``layer_idx``), so
  the stage's own KV cache sees its first block as layer 0 and the cache's length
  (which gives the positions and the causal mask) is right;
- a stage after the first gets ``inputs_embeds`` (the hidden states it receives) and
  its absolute position embedding, if the architecture has one (GPT-2's ``wpe``),
  adds 0: the first stage has already added it;
- a stage before the last has no final norm and returns the raw hidden states.

Architectures are recognised by the names of these parts (GPT-2, Llama-like:
Llama, Mistral, Qwen2, ...); others are refused with a clear message.
"""

from __future__ import annotations

from typing import Any

import torch

from acbslurm.serve.errors import ServeError
from acbslurm.values import mutable

FINAL_NORMS = ("ln_f", "norm", "final_layer_norm", "final_layernorm")
POSITION_EMBEDDINGS = ("wpe", "embed_positions")


class NoPositions(torch.nn.Module):
    """Stands in for an absolute position embedding on later stages: adds nothing."""

    def forward(self, positions: torch.Tensor) -> torch.Tensor:  # noqa: ARG002
        return torch.zeros((), dtype=torch.float32)


@mutable
class Stage:
    model: Any  # the (cut) CausalLM
    rank: int
    procs: int
    first_block: int
    blocks: int  # how many blocks this stage runs
    hidden: int  # width of the hidden states passed between stages

    @property
    def first(self) -> bool:
        return self.rank == 0

    @property
    def last(self) -> bool:
        return self.rank == self.procs - 1

    def forward(self, x: torch.Tensor, past: Any) -> tuple[torch.Tensor, Any]:
        """Token ids (first stage) or hidden states (later stages) in; hidden states
        (stages before the last) or the last position's logits (last stage) out."""
        kw: dict[str, Any] = {"past_key_values": past, "use_cache": True}
        kw["input_ids" if self.first else "inputs_embeds"] = x
        if self.last:
            out = self.model(**kw)
            return out.logits[0, -1], out.past_key_values
        out = self.model.base_model(**kw)
        return out.last_hidden_state, out.past_key_values


def split(layers: int, procs: int, rank: int) -> tuple[int, int]:
    """Blocks [start, end) of ``rank``: as even as possible, earlier stages smaller."""
    return layers * rank // procs, layers * (rank + 1) // procs


def layer_count(config: Any) -> int:
    n = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", None)
    return int(n or 0)


def _blocks(base: torch.nn.Module, layers: int) -> tuple[str, torch.nn.ModuleList]:
    for name, child in base.named_children():
        if isinstance(child, torch.nn.ModuleList) and len(child) == layers:
            return name, child
    raise ServeError(f"{type(base).__name__}: no list of {layers} blocks found")


def _named(base: torch.nn.Module, names: tuple[str, ...]) -> str | None:
    return next((n for n in names if isinstance(getattr(base, n, None), torch.nn.Module)), None)


def make_stage(model: Any, rank: int, procs: int) -> Stage:
    """Cut ``model`` (loaded whole, not yet on a device) down to stage ``rank`` of ``procs``."""
    base = model.base_model
    config = model.config
    layers = layer_count(config)
    if procs > layers:
        raise ServeError(f"the model has {layers} blocks; it cannot be cut into {procs} stages")
    name, blocks = _blocks(base, layers)
    start, end = split(layers, procs, rank)
    kept = torch.nn.ModuleList(list(blocks)[start:end])
    for i, block in enumerate(kept):
        m: Any
        for m in block.modules():
            if isinstance(getattr(m, "layer_idx", None), int):
                m.layer_idx = i  # the stage's own KV cache counts from 0
    setattr(base, name, kept)
    config.num_hidden_layers = end - start
    if isinstance(getattr(config, "layer_types", None), list):
        config.layer_types = config.layer_types[start:end]
    _cut_ends(model, base, rank, procs)
    hidden = int(getattr(config, "hidden_size", 0) or getattr(config, "n_embd", 0))
    return Stage(model, rank, procs, start, end - start, hidden)


def _cut_ends(model: Any, base: torch.nn.Module, rank: int, procs: int) -> None:
    """Drop the parts other stages run: embeddings after the first, norm and head before
    the last (a head tied to the embeddings keeps them on the last stage)."""
    if rank > 0:
        pos = _named(base, POSITION_EMBEDDINGS)
        if pos is not None:
            setattr(base, pos, NoPositions())
        tied = model.get_output_embeddings() is not None and (
            model.get_output_embeddings().weight is model.get_input_embeddings().weight
        )
        if rank < procs - 1 or not tied:
            model.set_input_embeddings(torch.nn.Embedding(1, 1))  # unused: inputs_embeds
    if rank < procs - 1:
        norm = _named(base, FINAL_NORMS)
        if norm is None:
            raise ServeError(f"{type(base).__name__}: its final norm is not known to the stages")
        setattr(base, norm, torch.nn.Identity())
        model.set_output_embeddings(torch.nn.Identity())
