"""`acbslurm run` without click, for the start of every job's container.

Importing click would be most of what `acbslurm run` adds to a plain `docker run`
(docs/benchmarks.md, "Where the client's time went"). This parser accepts exactly the
well-formed command lines of the click command in ``cli/container.py`` and gives up
(returns None) on anything else: help, unknown or malformed options, or a value the
command itself rejects. The click command then handles that line, so usage messages come
from one place. A unit test checks that both parse the same lines alike.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from acbslurm.container.options import RunArgs
from acbslurm.units import finite_float

TYPE_CHECKING = False  # a lean-path module: CONTRIBUTING.md, "Lean imports"
if TYPE_CHECKING:
    from typing import Any

    from acbslurm.container.probe import InfoProbe


def _float(value: str, minimum: float | None = None) -> float:
    x = finite_float(value)  # nan and inf: click's command says why
    if minimum is not None and x < minimum:
        raise ValueError(value)
    return x


def _pull(value: str) -> str:
    if value not in ("missing", "always", "never"):
        raise ValueError(value)
    return value


# option -> (RunArgs field, converter, repeatable); a converter None: a flag (no value)
_OPTIONS: dict[str, tuple[str, Callable[[str], Any] | None, bool]] = {
    "--gpus": ("gpus", str, False),
    "--mount": ("mounts", str, True),
    "--env": ("envs", str, True),
    "-e": ("envs", str, True),
    "-w": ("workdir", str, False),
    "--hostname": ("hostname", str, False),
    "-p": ("publish", str, True),
    "--publish": ("publish", str, True),
    "--ulimit": ("ulimits", str, True),
    "--network": ("network", str, False),
    "--device": ("devices", str, True),
    "--net": ("network", str, False),
    "--requeue-exit": ("requeue_exit", str, False),
    "--rm": ("remove", None, False),
    "--env-file": ("env_files", str, True),
    "--workdir": ("workdir", str, False),
    "--name": ("name", str, False),
    "--grace": ("grace", lambda v: _float(v, minimum=0), False),
    "--cpus": ("cpus", _float, False),
    "--memory": ("memory", str, False),
    "--pull": ("pull", _pull, False),
    "--user": ("user", str, False),
    "--shm-size": ("shm_size", str, False),
    "--entrypoint": ("entrypoint", str, False),
    "--read-only": ("read_only", None, False),
    "-i": ("interactive", None, False),
    "--interactive": ("interactive", None, False),
    "-t": ("tty", None, False),
    "--tty": ("tty", None, False),
}
_SHORT_FLAGS = "it"  # may come together: -it, -ti


def _option(argv: list[str], i: int) -> tuple[str, Any, int] | None:
    """The option at ``argv[i]``: (its option name, its value, the next index); None
    when click should handle the line."""
    name, eq, value = argv[i].partition("=")
    if name not in _OPTIONS:
        return None  # --help, -h, unknown or abbreviated options
    convert = _OPTIONS[name][1]
    if convert is None:
        return (name, True, i + 1) if not eq else None
    if not eq:
        if i + 1 >= len(argv) or argv[i + 1].startswith("-"):
            return None
        value = argv[i + 1]
        i += 1
    try:
        return name, convert(value), i + 1
    except ValueError:
        return None


def _store(name: str, value: Any, values: dict[str, Any], repeated: dict[str, list[Any]]) -> None:
    field, _convert, many = _OPTIONS[name]
    if many:
        repeated.setdefault(field, []).append(value)
    else:
        values[field] = value


# complexity: a scanner over argv: each branch is one shape of argument (`--`, the image, bundled
# short flags, an option and its value), and the position carries from one to the next; split, it
# would be passed in and returned.
def parse(argv: list[str]) -> RunArgs | None:
    """``argv`` after ``run``; None when click should handle it."""
    values: dict[str, Any] = {}
    repeated: dict[str, list[Any]] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            i += 1
            break
        if not arg.startswith("-") or arg == "-":
            break
        if not arg.startswith("--") and all(c in _SHORT_FLAGS for c in arg[1:]):
            for c in arg[1:]:  # -it: -i and -t
                _store(f"-{c}", True, values, repeated)
            i += 1
            continue
        taken = _option(argv, i)
        if taken is None:
            return None
        _store(taken[0], taken[1], values, repeated)
        i = taken[2]
    if i >= len(argv):
        return None  # no IMAGE
    values.update((field, tuple(items)) for field, items in repeated.items())
    return RunArgs(image=argv[i], command=tuple(argv[i + 1 :]), **values)


def try_run(argv: list[str], early: InfoProbe | None = None) -> int | None:
    """Run the container for ``argv`` (after ``run``): its exit code, or None for click.
    ``early``: the daemon's probe, started before this module was imported."""
    args = parse(argv)
    if args is None:
        return None
    from acbslurm.cli.logsetup import configure_logging
    from acbslurm.container.options import OptionError
    from acbslurm.container.run_command import execute
    from acbslurm.errors import AcbslurmError

    configure_logging(0)
    try:
        return execute(args, early)
    except OptionError:
        return None  # nothing was started: click repeats the checks and reports this
    except AcbslurmError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
