"""Rendered job scripts call the acbslurm the site installed on the nodes."""

from pathlib import Path

import pytest
from click.testing import CliRunner

from acbslurm.cli.jobs import render

ROOT = Path(__file__).resolve().parents[3]
SPEC = str(ROOT / "conf" / "examples" / "whisper.yaml")


def _srun_line(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("exec srun "))


def test_node_acbslurm_setting_names_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = tmp_path / "acbslurm.yaml"
    conf.write_text('{"node_acbslurm": "/opt/acbslurm/venv/bin/python -m acbslurm"}\n')
    monkeypatch.setenv("ACBSLURM_CONFIG", str(conf))
    r = CliRunner().invoke(render, [SPEC])
    assert r.exit_code == 0, r.output
    assert _srun_line(r.output).startswith(
        "exec srun --kill-on-bad-exit=1 /opt/acbslurm/venv/bin/python -m acbslurm run --gpus auto"
    )
    # the flag beats the setting; the environment beats the file
    r = CliRunner().invoke(render, [SPEC, "--acbslurm", "/x/acbslurm"])
    assert _srun_line(r.output).startswith("exec srun --kill-on-bad-exit=1 /x/acbslurm run")
    monkeypatch.setenv("ACBSLURM_NODE_ACBSLURM", "/shared/acbslurm/bin/acbslurm")
    r = CliRunner().invoke(render, [SPEC])
    assert _srun_line(r.output).startswith(
        "exec srun --kill-on-bad-exit=1 /shared/acbslurm/bin/acbslurm run"
    )
