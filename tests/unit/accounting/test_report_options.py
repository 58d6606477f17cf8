"""`acbslurm report`'s options: window, users, states, cluster, choices (no database)."""

from __future__ import annotations

import os
import pwd

import pytest

from acbslurm.accounting.options import (
    OptionError,
    ReportOptions,
    Selection,
    parse_states,
    parse_window,
    resolve,
    resolve_users,
)
from acbslurm.errors import ConfigError

NOW = 1_760_000_000


def test_window_relative_and_absolute() -> None:
    assert parse_window("now-1d", "now", NOW) == (NOW - 86400, NOW)
    assert parse_window("@1000", "@2000", NOW) == (1000, 2000)


@pytest.mark.parametrize(
    ("start", "end", "option", "quoted"),
    [
        ("yesterdayish", "now", "--start", "'yesterdayish'"),
        ("now-1d", "soon", "--end", "'soon'"),
        ("@2000", "@1000", "--start", "'@2000'"),
        ("now", "now", "--start", "'now'"),  # an empty window is no window
    ],
)
def test_bad_window_names_the_flag_and_quotes_the_value(
    start: str, end: str, option: str, quoted: str
) -> None:
    with pytest.raises(OptionError) as info:
        parse_window(start, end, NOW)
    assert info.value.option == option
    assert quoted in str(info.value)


def test_option_error_is_a_config_error_exit_2() -> None:
    assert issubclass(OptionError, ConfigError) and OptionError.exit_code == 2


def test_states_repeated_comma_separated_codes_and_names() -> None:
    assert parse_states(("R,cd", "failed", " ,")) == {"RUNNING", "COMPLETED", "FAILED"}
    assert parse_states(()) == frozenset()
    with pytest.raises(OptionError) as info:
        parse_states(("R,BOGUS",))
    assert info.value.option == "--state" and "'BOGUS'" in str(info.value)


def test_users_by_name_or_uid() -> None:
    me = pwd.getpwuid(os.getuid())
    assert resolve_users((me.pw_name, "65530")) == (me.pw_uid, 65530)
    with pytest.raises(OptionError) as info:
        resolve_users(("no-such-user-xyz",))
    assert info.value.option == "--user" and "'no-such-user-xyz'" in str(info.value)


def test_resolve_gives_the_selection() -> None:
    opts = ReportOptions(users=("7",), start="@100", end="@200", states=("CA",))
    assert resolve(opts, NOW) == Selection(100, 200, (7,), frozenset({"CANCELLED"}))


@pytest.mark.parametrize(
    ("opts", "option", "quoted"),
    [
        (ReportOptions(cluster="bad-name"), "--cluster", "'bad-name'"),
        (ReportOptions(by="week"), "--by", "'week'"),
        (ReportOptions(fmt="xml"), "--format", "'xml'"),
        (ReportOptions(definition="sshare"), "--definition", "'sshare'"),
        # The first bad option wins, in the order the command line is checked.
        (ReportOptions(start="bad", users=("no-such-user-xyz",)), "--start", "'bad'"),
        (ReportOptions(users=("no-such-user-xyz",), states=("X",)), "--user", "xyz'"),
        (ReportOptions(states=("X",), cluster="a-b"), "--state", "'X'"),
    ],
)
def test_resolve_rejects(opts: ReportOptions, option: str, quoted: str) -> None:
    with pytest.raises(OptionError) as info:
        resolve(opts, NOW)
    assert info.value.option == option and quoted in str(info.value)
