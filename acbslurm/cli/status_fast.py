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
            if not _job_id(argv[i]):
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


def _job_id(text: str) -> bool:
    """Digits, or an array task ``12_3`` (what ``jobrecord.JOB_ID`` matches, without
    importing re before the query's squeue starts)."""
    job, sep, task = text.partition("_")
    return _digits(job) and (not sep or _digits(task))


def _digits(text: str) -> bool:
    return bool(text) and text.isascii() and text.isdigit()


# 128 + SIGPIPE, what a shell reports for a writer whose reader went away (cli/main.py).
BROKEN_PIPE_EXIT = 141


def try_status(argv: list[str]) -> int | None:
    """Show the jobs for ``argv`` (after ``status``): the exit code, or None for click."""
    parsed = parse(argv)
    if parsed is None:
        return None
    from acbslurm.slurm.commands import discard_started

    early = _start_early(parsed[0], parsed[1])
    from acbslurm.cli.logsetup import configure_logging
    from acbslurm.errors import AcbslurmError

    configure_logging(0)
    try:
        chosen = _chosen_backend(parsed[0], parsed[1], early)
        from acbslurm.cli.jobstatus import show

        code = show(*parsed, chosen=chosen)
        sys.stdout.flush()
    except AcbslurmError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return _reader_gone()
    finally:
        discard_started()  # an error before the query read it
    return code


def _start_early(ids: list[str], user: str | None) -> bool:
    """Start the squeue the query reads first of all, before the settings are read and
    the code that reads and prints its answer is imported (json and re among them):
    those then run while slurmctld answers (docs/benchmarks.md, "One request"). Only where
    no pyslurm is installed, so that the backend can only be the CLI (a site's
    settings can choose pyslurm only where it is). True if started."""
    import os

    if os.environ.get("ACBSLURM_SLURM_BACKEND") == "pyslurm" or _findable("pyslurm"):
        return False
    _start_query(ids, user)
    return True


def _start_query(ids: list[str], user: str | None) -> None:
    """Start the squeue ``jobs.query_jobs`` will read for these ids and user."""
    from acbslurm.slurm.commands import start
    from acbslurm.slurm.squeue_query import squeue_argv

    start(squeue_argv(ids, user))


def _findable(name: str) -> bool:
    """Whether top-level module ``name`` can be imported: what importlib.util.find_spec
    asks the import system, without importing importlib.util (2 ms)."""
    if name in sys.modules:
        return True
    return any(
        finder.find_spec(name, None) is not None
        for finder in sys.meta_path
        if hasattr(finder, "find_spec")
    )


def _chosen_backend(ids: list[str], user: str | None, early: bool) -> str:
    """The Slurm backend the settings choose; with the CLI, the query's squeue started
    now if it was not already."""
    from acbslurm.cli.jobstatus import backend

    chosen = backend()
    if chosen == "cli" and not early:
        _start_query(ids, user)
    return chosen


def _reader_gone() -> int:
    """stdout's reader closed the pipe (``acbslurm status | head``): the interpreter's
    final flush must not fail too."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return BROKEN_PIPE_EXIT
