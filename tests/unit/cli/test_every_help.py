"""Every command's and subcommand's `--help` loads and exits 0.

The commands are imported lazily (cli/main.py's table): a typo in a module or attribute
name, or an import that fails, would otherwise show only when a user types that command
(a missing module even hides the command from `acbslurm --help`). This walks the table
and every group below it, through the console entry as a user runs it.
"""

from __future__ import annotations

import importlib

import click
import pytest
from cli_run import acbslurm

from acbslurm.cli.main import COMMANDS, cli


def _paths(group: click.Group, prefix: tuple[str, ...]) -> list[tuple[str, ...]]:
    ctx = click.Context(group)
    out = []
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None, f"{' '.join((*prefix, name))}: listed but not loadable"
        out.append((*prefix, name))
        if isinstance(cmd, click.Group):
            out += _paths(cmd, (*prefix, name))
    return out


ALL = _paths(cli, ())


def test_every_table_entry_names_a_command() -> None:
    for name, target in COMMANDS.items():
        module, attr = target.split(":")
        cmd = getattr(importlib.import_module(module), attr)
        assert isinstance(cmd, click.Command), name
    assert {p[0] for p in ALL} == set(COMMANDS)


def test_the_walk_reaches_the_subcommands() -> None:
    assert {("report", "serve"), ("sandbox", "up"), ("broker", "serve")} <= set(ALL)


@pytest.mark.parametrize("path", ALL, ids=[" ".join(p) for p in ALL])
def test_help(path: tuple[str, ...]) -> None:
    r = acbslurm(*path, "--help")
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith(f"Usage: acbslurm {' '.join(path)}"), r.stdout[:200]
    assert "Traceback" not in r.output
    assert "None]" not in r.stdout  # a range without bounds shown as "[x<=None]"


def test_top_level_help_lists_every_command() -> None:
    r = acbslurm("--help")
    assert r.exit_code == 0
    for name in COMMANDS:
        assert f"  {name}" in r.stdout, name


def test_agarun_help(capsys: pytest.CaptureFixture[str]) -> None:
    from acbslurm.broker.agarun import main

    try:
        main(["--help"])
    except SystemExit as done:  # an exit at all must be a clean one
        assert done.code in (0, None)
    assert capsys.readouterr().out.startswith("Usage: agarun")
