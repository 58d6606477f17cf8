"""How `acbslurm report` reaches the accounting data for this user: the read-only DB
option file (root, or whoever may read it), else the report service's unix socket."""

from __future__ import annotations

import configparser
import os
import socket
import stat

from acbslurm.doctor.context import Context
from acbslurm.doctor.result import Check, fail, ok, warn
from acbslurm.resources import conf_dir
from acbslurm.units import is_ascii_int

# The installed conf/ (package data of the wheel and the Debian package), or the checkout's.
FIX_SERVICE = (
    "start the report service on this host (`acbslurm report serve`, as the systemd unit "
    f"{conf_dir() / 'systemd' / 'acbslurm-report.service'}) and set report_socket to its "
    "socket; or, for root, set db_config to the read-only option file "
    f"({conf_dir() / 'report-db.example.cnf'})"
)


def report_socket(ctx: Context) -> str:
    """The ``report_socket`` setting (``ACBSLURM_REPORT_SOCKET`` is part of it)."""
    return ctx.settings.report_socket


def _connect(family: int, address: str | tuple[str, int]) -> str:
    """ "" when something accepts a connection at ``address``, else why not."""
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(3)
        try:
            s.connect(address)
        except OSError as exc:
            return exc.strerror or str(exc)
    return ""


def _db_address(text: str) -> tuple[str, int | str]:
    """The [client] host and port (or socket) of a MySQL option file."""
    cp = configparser.ConfigParser(allow_no_value=True, strict=False, interpolation=None)
    cp.read_string("\n".join(line for line in text.splitlines() if not line.startswith("!")))
    sec = cp["client"] if cp.has_section("client") else {}
    if sec.get("socket") and sec.get("host", "localhost") == "localhost":
        return "unix", str(sec["socket"])
    port = str(sec.get("port") or "3306")
    return str(sec.get("host") or "localhost"), int(port) if is_ascii_int(port) else 3306


def _read(path: str) -> tuple[str, str]:
    try:
        with open(path) as f:
            return f.read(), ""
    except OSError as exc:
        return "", exc.strerror or str(exc)


def check_report(ctx: Context) -> Check:
    """The DB option file when this user can read it (and the database answers), else
    the report service's socket."""
    path = ctx.settings.db_config
    text, db_why = _read(path) if path else ("", "db_config is not set")
    if not text:
        sock = report_socket(ctx)
        why = _connect(socket.AF_UNIX, sock)
        if not why:
            return ok("report", f"the report service answers at {sock}")
        return fail(
            "report",
            f"{ctx.user} can read no DB option file ({path or 'db_config'}: {db_why}) and no "
            f"report service answers at {sock} ({why})",
            FIX_SERVICE,
        )
    host, port = _db_address(text)
    if host == "unix":
        where, why = str(port), _connect(socket.AF_UNIX, str(port))
    else:
        where, why = f"{host}:{port}", _connect(socket.AF_INET, (host, int(port)))
    if why:
        return fail(
            "report",
            f"the DB option file {path} is readable, but the database at {where} does not "
            f"answer ({why})",
            "start MariaDB/MySQL there, or fix host/port in the option file",
        )
    if os.stat(path).st_mode & stat.S_IROTH:
        return warn(
            "report",
            f"{path} is readable by everyone: any user can read every user's jobs",
            f"chmod 600 {path} and let users go through the report service",
        )
    return ok("report", f"reads the accounting DB directly ({path}; {where} answers)")
