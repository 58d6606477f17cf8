"""Running `acbslurm ARGS` in-process through the click application, as a user runs it:
its exit code and what it printed, for tests that drive the CLI."""

from __future__ import annotations

import contextlib
import io


class Ran:
    """What `acbslurm ARGS` did, run through the console entry as a user runs it."""

    def __init__(self, exit_code: int, stdout: str, stderr: str) -> None:
        self.exit_code, self.stdout, self.stderr = exit_code, stdout, stderr
        self.output = stdout + stderr


def acbslurm(*argv: str) -> Ran:
    from acbslurm.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(argv))
        except SystemExit as exc:
            code = int(exc.code or 0)
    return Ran(code, out.getvalue(), err.getvalue())
