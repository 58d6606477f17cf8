"""`acbslurm status` without click, so that a look at the queue costs little more than
squeue's own.

Importing click and the command modules took about 60 ms of each `acbslurm status`,
squeue itself about 20-40 ms on a queue of 256 jobs (bench/status_bench.py). This
parser accepts the plain status lines (job ids, ``--user``/``-u``, ``-l``/``--long``,
``--json``) and gives up (returns None) on anything else: help, ``--gpus``, unknown
or abbreviated options, a malformed job id. The click command (``cli/jobs.py``) then
handles that line, so usage messages come from one place; both print through
``jobstatus.show``. A unit test checks that both parse the same lines alike.
"""

from __future__ import annotations

import sys

_FLAGS = {"-l": "long", "--long": "long", "--json": "as_json"}
_USER = ("-u", "--user")


def _option(argv: list[str], i: int) -> tuple[str, str | bool, int] | None:
    """The option at ``argv[i]``: (what it sets, its value, the next index); None when
    click should handle the line."""
    arg = argv[i]
    if arg in _FLAGS:
        return _FLAGS[arg], True, i + 1
    if arg in _USER and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
        return "user", argv[i + 1], i + 2
    name, eq, value = arg.partition("=")
    if name == "--user" and eq and value:
        return "user", value, i + 1
    return None  # --help, --gpus, -lu, unknown or abbreviated options


def parse(argv: list[str]) -> tuple[list[str], str | None, bool, bool] | None:
    """``argv`` after ``status``: (job ids, user, long, as_json); None when click
    should handle the line."""
    ids: list[str] = []
    values: dict[str, str | bool] = {}
    i = 0
    while i < len(argv):
        if not argv[i].startswith("-"):
            from acbslurm.jobrecord import JOB_ID  # only with ids: its import is 2-5 ms

            if not JOB_ID.match(argv[i]):
                return None  # click says what a job id looks like
            ids.append(argv[i])
            i += 1
            continue
        taken = _option(argv, i)
        if taken is None:
            return None
        values[taken[0]] = taken[1]
        i = taken[2]
    user = values.get("user")
    return ids, user if isinstance(user, str) else None, "long" in values, "as_json" in values


# 128 + SIGPIPE, what a shell reports for a writer whose reader went away (cli/main.py).
BROKEN_PIPE_EXIT = 141


def try_status(argv: list[str]) -> int | None:
    """Show the jobs for ``argv`` (after ``status``): the exit code, or None for click."""
    parsed = parse(argv)
    if parsed is None:
        return None
    from acbslurm.cli.jobstatus import show
    from acbslurm.cli.logsetup import configure_logging
    from acbslurm.errors import AcbslurmError

    configure_logging(0)
    try:
        code = show(*parsed)
        sys.stdout.flush()
    except AcbslurmError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return _reader_gone()
    return code


def _reader_gone() -> int:
    """stdout's reader closed the pipe (``acbslurm status | head``): the interpreter's
    final flush must not fail too."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return BROKEN_PIPE_EXIT
