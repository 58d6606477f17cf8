"""What a worker and a follower both do first: their library settings, loading the model."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from acbslurm.serve.modelproc import load_causal_lm, prepare_model_process
from acbslurm.serve.pool import ModelSpec

SETTINGS = {
    "TORCH_CPP_LOG_LEVEL": "ERROR",
    "HF_HUB_OFFLINE": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TRANSFORMERS_VERBOSITY": "error",
}


def test_settings_are_defaults_the_environment_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TRANSFORMERS_VERBOSITY", "info")  # the user's own choice stays
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        prepare_model_process()
        warnings.warn("past_key_values is renamed", FutureWarning, stacklevel=1)
        warnings.warn("something else", UserWarning, stacklevel=1)
    assert [w.category for w in seen] == [UserWarning]  # transformers' renames are quiet
    assert {name: os.environ[name] for name in SETTINGS} == {
        **SETTINGS,
        "TRANSFORMERS_VERBOSITY": "info",
    }


def test_load_causal_lm_in_eval_mode_with_the_threads_asked_for(
    tiny_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    before = torch.get_num_threads()
    monkeypatch.setenv("ACBSLURM_SERVE_THREADS", "2")
    try:
        model, dtype = load_causal_lm(
            ModelSpec(name="model-a", path=str(tiny_models["model-a"]), dtype="bfloat16")
        )
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert dtype is torch.bfloat16 and not model.training
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
