"""Every file acbslurm reads on a user's behalf, named as /dev/zero, /dev/urandom, a FIFO
or a file past its limit, through the CLI as a user types it: one line naming the file and
the rule, exit 2, at once (the FIFO has no writer: a blocking open would hang the test)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cli_run import acbslurm

from acbslurm.userfiles import MIB

REPO = Path(__file__).resolve().parents[3]
SPEC = REPO / "conf" / "examples" / "whisper.yaml"


@pytest.fixture
def bad(tmp_path: Path) -> dict[str, str]:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (MIB + 1))
    return {
        "/dev/zero": "is a character device, not a regular file",
        "/dev/urandom": "is a character device, not a regular file",
        str(fifo): "is a FIFO (named pipe), not a regular file",
        str(big): "is larger than 1 MiB, the limit for a",
    }


def check(ran: object, path: str, rule: str, what: str) -> None:
    code, err = ran.exit_code, ran.stderr  # type: ignore[attr-defined]
    assert code == 2, err
    assert f"{what} '{path}' {rule}" in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_job_specs(bad: dict[str, str]) -> None:
    for path, rule in bad.items():
        check(acbslurm("render", path), path, rule, "job spec")


def test_sbatch_templates(bad: dict[str, str]) -> None:
    for path, rule in bad.items():
        check(acbslurm("render", str(SPEC), "--template", path), path, rule, "sbatch template")


def test_pool_files(bad: dict[str, str]) -> None:
    for path, rule in bad.items():
        check(acbslurm("serve", path), path, rule, "pool file")


def test_settings_files(bad: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    for path, rule in bad.items():
        monkeypatch.setenv("ACBSLURM_CONFIG", path)
        check(acbslurm("render", str(SPEC)), path, rule, "settings file")


def test_a_spec_of_too_many_values_names_that_limit(tmp_path: Path) -> None:
    spec = tmp_path / "env.yaml"
    env = "".join(f"  V{i}: x\n" for i in range(10_001))
    spec.write_text(f"name: x\ncommand: [true]\nenv:\n{env}")
    r = acbslurm("render", str(spec))
    assert r.exit_code == 2 and "has more than 10000 values" in r.stderr, r.stderr
    assert "alias" not in r.stderr
    bomb = tmp_path / "bomb.yaml"
    tens = ", ".join(["*a"] * 10), ", ".join(["*b"] * 10), ", ".join(["*c"] * 11)
    bomb.write_text(
        f"a: &a [{', '.join('x' * 10)}]\nb: &b [{tens[0]}]\nc: &c [{tens[1]}]\nd: [{tens[2]}]\n"
    )
    r = acbslurm("render", str(bomb))
    assert r.exit_code == 2 and "through YAML aliases" in r.stderr, r.stderr


@pytest.mark.parametrize("uid", ["99999999999999999999", "4294967295", "9" * 5000])
def test_report_refuses_a_uid_out_of_range(uid: str) -> None:
    r = acbslurm("report", "--user", uid)
    assert r.exit_code == 2, r.output
    assert "is out of range (0 to 4294967294)" in r.stderr and "Traceback" not in r.stderr
