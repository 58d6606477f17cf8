"""`acbslurm report`'s options: window, users, states, cluster, choices (no database)."""

from __future__ import annotations

import os
import pwd
import socket
from collections.abc import Iterator
from pathlib import Path

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
    # leading zeros are no digits of size (int() refuses more than 4300 of any kind)
    zeros = "0" * 5000
    assert parse_window(f"now-{zeros}1d", f"@{zeros}{NOW}", NOW) == (NOW - 86400, NOW)


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


OUTSIDE = "is outside what slurmdbd records (1970-01-01 to 9999-12-31)"
UNREADABLE = "cannot read time"


@pytest.fixture
def no_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    """A listening socket as the database: the test asserts nobody connected to it."""
    (tmp_path / "settings.yaml").write_text(f"report_socket: {tmp_path}/no-service.sock\n")
    monkeypatch.setenv("ACBSLURM_CONFIG", str(tmp_path / "settings.yaml"))
    monkeypatch.setenv("ACBSLURM_DB_CONFIG", str(tmp_path / "no-such.cnf"))
    db = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    db.bind(str(tmp_path / "mysql.sock"))
    db.listen(4)
    db.setblocking(False)
    monkeypatch.setenv("ACBSLURM_DB_SOCKET", str(tmp_path / "mysql.sock"))
    yield db
    db.close()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("now-99999999999999999999999w", OUTSIDE),
        ("now-999999999999w", OUTSIDE),
        ("now-9999999w", OUTSIDE),
        ("@99999999999999999999", OUTSIDE),
        ("@253402300800", OUTSIDE),  # 10000-01-01T00:00:00Z
        ("1969-12-31", OUTSIDE),
        ("now-" + "9" * 5000 + "s", OUTSIDE),  # int() alone would say "Exceeds the limit"
        ("@" + "9" * 5000, OUTSIDE),
        ("now-\uff11w", UNREADABLE),  # full-width digits are no digits here
        ("@\uff11\uff12\uff13", UNREADABLE),
        ("\uff12\uff10\uff12\uff16-01-01", UNREADABLE),
    ],
)
@pytest.mark.parametrize("option", ["--start", "--end"])
def test_report_refuses_times_slurmdbd_cannot_hold_before_any_connection(
    no_database: socket.socket,
    capsys: pytest.CaptureFixture[str],
    option: str,
    value: str,
    message: str,
) -> None:
    from acbslurm.cli.main import main

    other = ["--end", "now"] if option == "--start" else ["--start", "@0"]
    with pytest.raises(SystemExit) as info:
        main(["report", option, value, *other])
    err = capsys.readouterr().err
    assert info.value.code == 2, err
    assert f"Invalid value for '{option}': " in err and message in err
    assert "Exceeds the limit" not in err and "Traceback" not in err
    assert len(err) < 1000  # the value is quoted, clipped
    with pytest.raises(BlockingIOError):
        no_database.accept()  # nothing tried the database


@pytest.mark.parametrize("value", ["now-99999999999999999999999w", "@" + "9" * 5000])
def test_report_refuses_such_times_before_asking_the_report_service(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    value: str,
) -> None:
    # A user who cannot read the database credentials goes through the report service:
    # a bad window is still refused here, before anything connects to it.
    from acbslurm.cli.main import main

    service = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    service.bind(str(tmp_path / "report.sock"))
    service.listen(4)
    service.setblocking(False)
    (tmp_path / "settings.yaml").write_text(f"report_socket: {tmp_path}/report.sock\n")
    monkeypatch.setenv("ACBSLURM_CONFIG", str(tmp_path / "settings.yaml"))
    monkeypatch.setenv("ACBSLURM_DB_CONFIG", str(tmp_path / "no-such.cnf"))
    for name in [
        k for k in os.environ if k.startswith("ACBSLURM_DB_") and k != "ACBSLURM_DB_CONFIG"
    ]:
        monkeypatch.delenv(name)
    with pytest.raises(SystemExit) as info:
        main(["report", "--start", value])
    err = capsys.readouterr().err
    assert info.value.code == 2, err
    assert OUTSIDE in err
    with pytest.raises(BlockingIOError):
        service.accept()
    service.close()
