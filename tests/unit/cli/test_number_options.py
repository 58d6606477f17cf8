"""Every number option of every command reads ASCII digits and finite numbers only.

click's own INT and FLOAT are ``int()`` and ``float()``: ``-n ٢`` was read as 2, and
``--connect-timeout nan`` made agarun wait forever (``inf``: OverflowError). Each bad
value is a usage error: exit 2, the option named, the value quoted, no traceback.
"""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
from cli_run import acbslurm
from click.testing import CliRunner

from acbslurm.broker.agarun import cli as agarun_cli
from acbslurm.clitypes import AsciiInt, FiniteFloat

PACKAGE = Path(__file__).resolve().parents[3] / "acbslurm"
ARABIC_2 = "\u0662"  # Arabic-Indic 2, which int() reads as 2
ARABIC_6 = "\u0666"  # Arabic-Indic 6: int(ARABIC_6 * 3, 8) is 0o666


CASES = [
    (["submit", "-n", ARABIC_2, "--dry-run", "job.yaml"], "-n", ARABIC_2),
    (["submit", "--interval", "nan", "job.yaml"], "--interval", "nan"),
    (["submit", "--interval", "inf", "job.yaml"], "--interval", "inf"),
    (["broker", "status", "--timeout", "nan"], "--timeout", "nan"),
    (["broker", "status", "--timeout", "inf"], "--timeout", "inf"),
    (["broker", "serve", "--quantum", "nan"], "--quantum", "nan"),
    (["broker", "serve", "--recovery-grace", "inf"], "--recovery-grace", "inf"),
    (["demo", "--hold", "nan"], "--hold", "nan"),
    (["demo", "--timeout", "inf"], "--timeout", "inf"),
    (["broker", "serve", "--socket-mode", ARABIC_6 * 3], "--socket-mode", ARABIC_6 * 3),
    (["broker", "serve", "--socket-mode", "6_00"], "--socket-mode", "6_00"),
    (["sandbox", "up", "--gpus", ARABIC_2], "--gpus", ARABIC_2),
    (["sandbox", "up", "--nodes", "²"], "--nodes", "²"),
    (["sandbox", "up", "--port-base", "2" + ARABIC_2 * 4], "--port-base", "2" + ARABIC_2 * 4),
    (["report", "--db-port", ARABIC_2], "--db-port", ARABIC_2),
    (["run", "--grace", "nan", "img"], "--grace", "nan"),
    (["run", "--cpus", "inf", "img"], "--cpus", "inf"),
    (["run", "--cpus", ARABIC_2, "img"], "--cpus", ARABIC_2),
]


@pytest.mark.parametrize(("argv", "option", "value"), CASES)
def test_a_bad_number_is_a_usage_error(argv: list[str], option: str, value: str) -> None:
    ran = acbslurm(*argv)
    code, err = ran.exit_code, ran.stderr
    assert code == 2, err
    assert f"Invalid value for '{option}'" in err or f"Invalid value for '{option}'/" in err
    assert repr(value) in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--connect-timeout", "nan"),
        ("--connect-timeout", "inf"),
        ("--reconnect-timeout", "inf"),
        ("--idle-ms", "nan"),
        ("--idle-ms", ARABIC_2),
    ],
)
def test_agarun_refuses_non_finite_and_non_ascii_numbers(option: str, value: str) -> None:
    res = CliRunner().invoke(agarun_cli, [option, value, "--", "python", "app.py"])
    assert res.exit_code == 2, res.output
    assert isinstance(res.exception, SystemExit)
    assert f"Invalid value for '{option}'" in res.output
    assert repr(value) in res.output


def test_ranges_still_read_as_click_wrote_them() -> None:
    @click.command()
    @click.option("-n", type=AsciiInt(min=1), default=1)
    @click.option("--t", type=FiniteFloat(min=0.1), default=1.0)
    def cmd(n: int, t: float) -> None:
        click.echo(f"{n} {t}")

    runner = CliRunner()
    assert runner.invoke(cmd, ["-n", "12", "--t", "2.5"]).output == "12 2.5\n"
    assert runner.invoke(cmd, []).output == "1 1.0\n"
    res = runner.invoke(cmd, ["-n", "0"])
    assert res.exit_code == 2 and "0 is not in the range x>=1" in res.output
    res = runner.invoke(cmd, ["--t", "0.01"])
    assert res.exit_code == 2 and "0.01 is not in the range x>=0.1" in res.output
    assert "[x>=1]" in runner.invoke(cmd, ["--help"]).output
    res = runner.invoke(cmd, ["-n", "-3"])
    assert res.exit_code == 2 and "-3 is not in the range x>=1" in res.output


def test_no_command_uses_clicks_own_number_types() -> None:
    """They would let ``٢``, ``nan`` and ``inf`` in again: clitypes holds the only ones."""
    raw = re.compile(r"type=(int|float)\b|click\.(IntRange|FloatRange|INT|FLOAT)\b")
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{n}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "clitypes.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if raw.search(line)
    ]
    assert found == []
