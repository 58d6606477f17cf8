"""`acbslurm report`'s options, checked before the database is touched.

Pure apart from user names (passwd). Every bad value raises ``OptionError``, which names
the flag and quotes the value; the CLI shows it as a usage error (exit 2), and as a
``ConfigError`` it has that exit code without the CLI too.
"""

from __future__ import annotations

from collections.abc import Iterable

from acbslurm.accounting.gpuseconds import DEFINITIONS
from acbslurm.accounting.grouping import GROUP_KEYS
from acbslurm.accounting.output import FORMATS
from acbslurm.accounting.report import resolve_user
from acbslurm.accounting.schema import is_cluster_name
from acbslurm.errors import ConfigError
from acbslurm.slurm.states import normalize_state
from acbslurm.units import parse_instant
from acbslurm.values import frozen

DEFAULT_START = "now-30d"
BY_CHOICES = ("job", *GROUP_KEYS, "key")


class OptionError(ConfigError):
    """A bad option value; ``option`` names the flag (``--start``)."""

    def __init__(self, option: str, message: str) -> None:
        self.option = option
        super().__init__(message)


@frozen
class ReportOptions:
    """The report as asked for, values as given; ``None`` leaves a setting to the
    environment or the settings file."""

    users: tuple[str, ...] = ()
    accounts: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()
    start: str = DEFAULT_START
    end: str = "now"
    states: tuple[str, ...] = ()
    by: str = "job"
    fmt: str = "table"
    definition: str = "sacct"
    cluster: str | None = None
    db_config: str | None = None
    db_host: str | None = None
    db_port: int | None = None
    db_socket: str | None = None
    db_user: str | None = None
    db_name: str | None = None


@frozen
class Selection:
    """The options resolved: the window in unix seconds, uids, state names."""

    start: int
    end: int
    uids: tuple[int, ...]
    states: frozenset[str]


def parse_states(values: Iterable[str]) -> frozenset[str]:
    """``--state`` values (repeated or comma-separated, names or sacct codes)."""
    out: set[str] = set()
    for value in values:
        for part in value.split(","):
            if not part.strip():
                continue
            try:
                out.add(normalize_state(part))
            except ValueError as exc:
                raise OptionError("--state", str(exc)) from None
    return frozenset(out)


def parse_window(start: str, end: str, now: int) -> tuple[int, int]:
    """``--start`` and ``--end`` as unix seconds; the start must come first."""
    bounds: list[int] = []
    for name, text in (("--start", start), ("--end", end)):
        try:
            bounds.append(parse_instant(text, now))
        except ValueError as exc:
            raise OptionError(name, str(exc)) from None
    win_start, win_end = bounds
    if win_start >= win_end:
        raise OptionError("--start", f"window start {start!r} is not before end {end!r}")
    return win_start, win_end


def resolve_users(users: Iterable[str]) -> tuple[int, ...]:
    """``--user`` values (names or uids) as uids."""
    uids: list[int] = []
    for user in users:
        try:
            uids.append(resolve_user(user))
        except ValueError as exc:
            raise OptionError("--user", str(exc)) from None
    return tuple(uids)


def _check_choice(option: str, value: str, choices: tuple[str, ...]) -> None:
    # click checks these on the command line; callers in Python get the same message.
    if value not in choices:
        raise OptionError(option, f"{value!r} is not one of {', '.join(choices)}")


def resolve(opts: ReportOptions, now: int) -> Selection:
    """Check every option; the first bad one raises ``OptionError``."""
    _check_choice("--by", opts.by, BY_CHOICES)
    _check_choice("--format", opts.fmt, FORMATS)
    _check_choice("--definition", opts.definition, DEFINITIONS)
    if opts.by == "key" and opts.fmt == "html":
        raise OptionError("--by", "'key' is a table, csv or json report (not html)")
    win_start, win_end = parse_window(opts.start, opts.end, now)
    uids = resolve_users(opts.users)
    states = parse_states(opts.states)
    if opts.cluster and not is_cluster_name(opts.cluster):
        raise OptionError(
            "--cluster", f"{opts.cluster!r} is not a Slurm cluster name (letters, digits, _)"
        )
    return Selection(start=win_start, end=win_end, uids=uids, states=states)
