"""`acbslurm ... | head`: a reader that goes away ends any command quietly."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

# A stand-in command that prints far more than a pipe holds, as a big report does.
COMMAND = textwrap.dedent(
    r"""
    import click

    import select
    import sys

    @click.command()
    @click.option("--lines", type=int)
    def spam(lines):
        if lines < 0:  # the reader is gone before the buffered rest is flushed at exit
            sys.stdout.write("row 0\n")
            sys.stdout.flush()
            gone = select.poll()  # until the reader closed the pipe (POLLERR)
            gone.register(sys.stdout.fileno(), 0)
            gone.poll(30_000)
            sys.stdout.write("row 1\n" * -lines)
            return
        for i in range(lines):
            click.echo(f"row {i} " + "x" * 60)
    """
)
SCRIPT = textwrap.dedent(
    """
    import acbslurm.cli.main as m

    m.COMMANDS["spam"] = "spam_cmd:spam"
    from acbslurm.cli.entry import main
    main()
    """
)


@pytest.mark.parametrize("lines", [5, 200_000, -50])
def test_a_closed_pipe_is_no_traceback(tmp_path: Path, lines: int) -> None:
    script = tmp_path / "spam.py"
    script.write_text(SCRIPT)
    (tmp_path / "spam_cmd.py").write_text(COMMAND)
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"}
    err = tmp_path / "err"
    proc = subprocess.run(
        f"{sys.executable} {script} spam --lines {lines} 2>{err} | head -n 1",
        shell=True,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.stdout.startswith("row 0")
    assert err.read_text() == ""  # no traceback, no "Exception ignored"
