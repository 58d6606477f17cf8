"""`acbslurm run` without click, for the start of every job's container.

Importing click costs about 21 ms, most of what `acbslurm run` adds to a plain
`docker run` (bench/run_bench.py). This parser accepts exactly the well-formed
command lines of the click command in ``cli/container.py`` and gives up (returns
None) on anything else: help, unknown or malformed options, or a value the command
itself rejects. The click command then handles that line, so usage messages come
from one place. A unit test checks that both parse the same lines alike.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from acbslurm.container.run_command import RunArgs
from acbslurm.units import finite_float


def _float(value: str, minimum: float | None = None) -> float:
    x = finite_float(value)  # nan and inf: click's command says why
    if minimum is not None and x < minimum:
        raise ValueError(value)
    return x


def _pull(value: str) -> str:
    if value not in ("missing", "always", "never"):
        raise ValueError(value)
    return value


# option -> (RunArgs field, converter, repeatable)
_OPTIONS: dict[str, tuple[str, Callable[[str], Any], bool]] = {
    "--gpus": ("gpus", str, False),
    "--mount": ("mounts", str, True),
    "--env": ("envs", str, True),
    "--workdir": ("workdir", str, False),
    "--name": ("name", str, False),
    "--grace": ("grace", lambda v: _float(v, minimum=0), False),
    "--cpus": ("cpus", _float, False),
    "--memory": ("memory", str, False),
    "--pull": ("pull", _pull, False),
}


def parse(argv: list[str]) -> RunArgs | None:
    """``argv`` after ``run``; None when click should handle it."""
    values: dict[str, Any] = {}
    repeated: dict[str, list[str]] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            i += 1
            break
        if not arg.startswith("-") or arg == "-":
            break
        name, eq, value = arg.partition("=")
        if name not in _OPTIONS:
            return None  # --help, -h, unknown or abbreviated options
        if not eq:
            if i + 1 >= len(argv) or argv[i + 1].startswith("-"):
                return None
            value = argv[i + 1]
            i += 1
        field, convert, many = _OPTIONS[name]
        try:
            converted = convert(value)
        except ValueError:
            return None
        if many:
            repeated.setdefault(field, []).append(converted)
        else:
            values[field] = converted
        i += 1
    if i >= len(argv):
        return None  # no IMAGE
    values.update((field, tuple(items)) for field, items in repeated.items())
    return RunArgs(image=argv[i], command=tuple(argv[i + 1 :]), **values)


def try_run(argv: list[str]) -> int | None:
    """Run the container for ``argv`` (after ``run``): its exit code, or None for click."""
    args = parse(argv)
    if args is None:
        return None
    from acbslurm.cli.logsetup import configure_logging
    from acbslurm.container.options import OptionError
    from acbslurm.container.run_command import execute
    from acbslurm.errors import AcbslurmError

    configure_logging(0)
    try:
        return execute(args)
    except OptionError:
        return None  # nothing was started: click repeats the checks and reports this
    except AcbslurmError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
