"""Rendering is a pure function: spec in, script out, compared with golden files.

Regenerate after an intended template change with ACBSLURM_UPDATE_GOLDEN=1.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from acbslurm.errors import ConfigError, SpecError
from acbslurm.render import render, sbatch_quote, sh_quote
from acbslurm.spec import load_spec, parse_spec

REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "golden"
ACBSLURM = "/usr/local/bin/acbslurm"

CASES = {
    "whisper": REPO / "conf/examples/whisper.yaml",
    "sandbox-gpu": REPO / "conf/examples/sandbox-gpu.yaml",
    "checkpoint": REPO / "conf/examples/checkpoint.yaml",
    "full": GOLDEN / "full.yaml",
    "direct": GOLDEN / "direct.yaml",
    "options": GOLDEN / "options.yaml",
    "per-task": GOLDEN / "per-task.yaml",
    "total": GOLDEN / "total.yaml",
    "contract": GOLDEN / "contract.yaml",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(case: str) -> None:
    text = render(load_spec(CASES[case]), acbslurm=ACBSLURM)
    golden = GOLDEN / f"{case}.sh"
    if os.environ.get("ACBSLURM_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text()


def test_render_is_pure() -> None:
    spec = load_spec(CASES["full"])
    assert render(spec, acbslurm=ACBSLURM) == render(spec, acbslurm=ACBSLURM)


def test_whisper_has_seed_directives_and_gpu_container() -> None:
    text = render(load_spec(CASES["whisper"]), acbslurm=ACBSLURM)
    for line in [
        "#SBATCH --partition=p1",
        "#SBATCH --job-name=openai-whisper",
        "#SBATCH --nodes=1",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --ntasks=1",
        "#SBATCH --cpus-per-task=2",
        "#SBATCH --mem=2G",
        "#SBATCH --gres=gpu:1",
        "#SBATCH --output=openai-whisper.out",
        "#SBATCH --error=openai-whisper.err",
        "#SBATCH --account=user1",
    ]:
        assert line in text.splitlines()
    assert f"exec srun --kill-on-bad-exit=1 {ACBSLURM} run --gpus auto" in text
    assert "openai-whisper:latest -- whisper --model turbo" in text


# Directives that are flags without a value.
FLAGS = ("#SBATCH --exclusive", "#SBATCH --requeue", "#SBATCH --no-requeue", "#SBATCH --hold")


def test_no_empty_directives() -> None:
    text = render(parse_spec('command: ["true"]\n', "x.yaml"), acbslurm=ACBSLURM)
    assert "#SBATCH" not in text
    for case in CASES.values():
        for line in render(load_spec(case), acbslurm=ACBSLURM).splitlines():
            if line.startswith("#SBATCH") and line not in FLAGS:
                _, _, value = line.partition("=")
                assert value and value != '""' and value != "None", line


def test_acbslurm_command_words_are_quoted() -> None:
    text = render(
        load_spec(CASES["sandbox-gpu"]), acbslurm=["/opt/my env/python", "-m", "acbslurm"]
    )
    assert "exec srun --kill-on-bad-exit=1 '/opt/my env/python' -m acbslurm run" in text


def test_site_template_can_extend_packaged_one(tmp_path: Path) -> None:
    site = tmp_path / "site.sh.j2"
    site.write_text(
        '{% extends "sbatch.sh.j2" %}\n{% block environment %}\nmodule load cuda\n'
        "{{ super() }}{% endblock %}\n"
    )
    text = render(load_spec(CASES["whisper"]), acbslurm=ACBSLURM, template=site)
    assert "module load cuda" in text
    assert "#SBATCH --gres=gpu:1" in text


def test_site_template_errors_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        render(load_spec(CASES["whisper"]), acbslurm=ACBSLURM, template=tmp_path / "none.j2")
    bad = tmp_path / "bad.j2"
    bad.write_text("{{ job.nosuchkey }}\n")
    with pytest.raises(ConfigError, match=r"bad\.j2"):
        render(load_spec(CASES["whisper"]), acbslurm=ACBSLURM, template=bad)


def test_quoting_helpers() -> None:
    assert sbatch_quote("p1") == "p1"
    assert sbatch_quote('a "b" \\c') == '"a \\"b\\" \\\\c"'
    with pytest.raises(SpecError):
        sbatch_quote("a\nb")
    assert sh_quote("a'b") == "'a'\"'\"'b'"
    with pytest.raises(SpecError):
        sh_quote("a\x00b")


def test_sbatch_args_values_are_quoted_like_every_value() -> None:
    text = render(
        parse_spec(
            'command: ["true"]\nsbatch_args: ["--comment=a #b \\"c\\"", "--begin=now+1hour"]\n',
            "x.yaml",
        ),
        acbslurm=ACBSLURM,
    )
    assert '#SBATCH --comment="a #b \\"c\\""' in text
    assert "#SBATCH --begin=now+1hour" in text
