"""Where the accounting database is and how to log in (never how to print the password).

Layering, most specific first: ``--db-*`` flags, the environment (``ACBSLURM_DB_HOST``,
``_PORT``, ``_SOCKET``, ``_USER``, ``_NAME``, ``_PASSWORD``), then a MySQL option file
(``--db-config``, ``ACBSLURM_DB_CONFIG`` or ``Settings.db_config``) read by the client
library itself. The password comes only from the option file or ``ACBSLURM_DB_PASSWORD``:
there is no flag for it, so it never lands on a command line or in a process title.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from acbslurm.errors import ConfigError
from acbslurm.values import field, frozen

# slurmdbd's default StorageLoc; used when neither flag, env nor option file names one.
DEFAULT_DATABASE = "slurm_acct_db"
PASSWORD_ENV = "ACBSLURM_DB_PASSWORD"  # noqa: S105 (a variable name, not a secret)


@frozen
class DbConfig:
    option_file: str = ""
    host: str = ""
    port: int = 0
    socket: str = ""
    user: str = ""
    database: str = ""
    # repr=False: a DbConfig in a log line or traceback never shows it.
    password: str | None = field(default=None, repr=False)

    def describe(self) -> str:
        """Where we connect, for error messages (no password, ever)."""
        if self.socket:
            where = f"socket {self.socket}"
        elif self.host:
            where = f"{self.host}:{self.port or 3306}"
        elif self.option_file:
            where = f"the server named in {self.option_file}"
        else:
            where = "the local default server"
        who = f" as {self.user!r}" if self.user else ""
        return where + who

    def connect_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``MySQLdb.connect``; explicit values beat the option file."""
        kw: dict[str, Any] = {"connect_timeout": 10, "charset": "utf8mb4", "use_unicode": True}
        if self.option_file:
            kw["read_default_file"] = self.option_file
            kw["read_default_group"] = "client"
        if self.host:
            kw["host"] = self.host
        if self.port:
            kw["port"] = self.port
        if self.socket:
            kw["unix_socket"] = self.socket
        if self.user:
            kw["user"] = self.user
        if self.database:
            kw["database"] = self.database
        if self.password is not None:
            kw["password"] = self.password
        return kw


def _port(raw: str | int | None, source: str) -> int:
    if raw in (None, ""):
        return 0
    try:
        port = int(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"{source}: port must be a number, got {raw!r}") from None
    if not 0 < port < 65536:
        raise ConfigError(f"{source}: port must be 1-65535, got {raw!r}")
    return port


def resolve_db_config(
    *,
    option_file: str | None = None,
    host: str | None = None,
    port: int | None = None,
    socket: str | None = None,
    user: str | None = None,
    database: str | None = None,
    settings_db_config: str = "",
    environ: Mapping[str, str] | None = None,
) -> DbConfig:
    """Merge flags (arguments), environment and settings into one ``DbConfig``."""
    env = os.environ if environ is None else environ

    def pick(flag: str | None, key: str) -> str:
        if flag not in (None, ""):
            return str(flag)
        return env.get(f"ACBSLURM_DB_{key}", "")

    opt = option_file or env.get("ACBSLURM_DB_CONFIG", "") or settings_db_config
    if opt:
        p = Path(opt)
        if not p.is_file():
            raise ConfigError(f"database option file {opt!r} does not exist")
        if not os.access(p, os.R_OK):
            raise ConfigError(f"database option file {opt!r} is not readable by this user")
    port_src = "--db-port" if port else "ACBSLURM_DB_PORT"
    return DbConfig(
        option_file=opt,
        host=pick(host, "HOST"),
        port=_port(port if port else env.get("ACBSLURM_DB_PORT"), port_src),
        socket=pick(socket, "SOCKET"),
        user=pick(user, "USER"),
        database=pick(database, "NAME"),
        password=env.get(PASSWORD_ENV) or None,
    )
