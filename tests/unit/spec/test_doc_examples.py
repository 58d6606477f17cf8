"""The specs the docs show are valid, and the one a sandbox test runs is the docs' own."""

from __future__ import annotations

import re
from pathlib import Path

from acbslurm.render import render
from acbslurm.spec import load_spec, parse_spec
from acbslurm.values import replace

REPO = Path(__file__).resolve().parents[3]


def yaml_blocks(doc: Path) -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", doc.read_text(), re.DOTALL)


def test_the_multi_node_spec_is_valid_and_renders_its_options() -> None:
    (text,) = yaml_blocks(REPO / "docs/multi-node.md")
    spec = parse_spec(text, "docs/multi-node.md")
    script = render(spec, acbslurm="/usr/local/bin/acbslurm")
    for line in ("--ulimit memlock=-1", "--device /dev/infiniband", "--shm-size 16g"):
        assert line in script, script
    assert "srun --kill-on-bad-exit=1" in script


def test_the_checkpoint_example_in_the_docs_is_the_one_the_tests_run() -> None:
    """docs/spec.md shows conf/examples/checkpoint.yaml (test_checkpoint_sandbox.py
    submits that file): the same spec, but for the docs' comments."""
    shown = next(b for b in yaml_blocks(REPO / "docs/spec.md") if "requeue_exit" in b)
    example = REPO / "conf/examples/checkpoint.yaml"
    assert parse_spec(shown, "docs/spec.md") == replace(load_spec(example), source="docs/spec.md")
