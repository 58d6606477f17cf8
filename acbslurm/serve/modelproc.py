"""What every process that runs a model (a worker, a follower) does alike: its settings
before torch or transformers is imported (offline, quiet libraries), and loading the
model from its directory."""

from __future__ import annotations

import logging
import os
import warnings
from typing import Any

from acbslurm.config import env_int
from acbslurm.serve.pool import ModelSpec


def prepare_model_process() -> None:
    """Logging to stderr, the library settings below unless the environment sets them."""
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    # torch's C++ warnings (a stack trace each) when a group's peer goes away: the
    # process says it in one line of its own.
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never download anything
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    # transformers 5 renames past_key_values; the old name works for every architecture.
    warnings.filterwarnings("ignore", category=FutureWarning)


def load_causal_lm(spec: ModelSpec) -> tuple[Any, Any]:
    """``(model, dtype)``: the spec's model in its dtype, in eval mode, on the host, with
    ``ACBSLURM_SERVE_THREADS`` torch threads (1 by default: processes share the cores)."""
    # after prepare_model_process (the environment torch reads) and the broker registration
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(env_int("ACBSLURM_SERVE_THREADS", 1, minimum=1))
    dtype = getattr(torch, spec.dtype)
    return AutoModelForCausalLM.from_pretrained(spec.path, dtype=dtype).eval(), dtype
