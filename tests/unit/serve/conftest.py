"""Shared fixtures for the serve tests: tiny models made once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from acbslurm.serve.modelmaker import TinyShape, make_model


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("serve-models")
    return {
        "model-a": make_model(root / "a", TinyShape(), seed=1),
        "model-b": make_model(root / "b", TinyShape(), seed=2),
        "model-c": make_model(root / "c", TinyShape(layers=3), seed=3),
    }
