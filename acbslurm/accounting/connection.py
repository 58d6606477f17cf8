"""Open a read-only session on the accounting database with clear failure messages."""

from __future__ import annotations

import logging
from typing import Any

from acbslurm.accounting.dbconfig import DEFAULT_DATABASE, DbConfig
from acbslurm.errors import AccountingError

log = logging.getLogger(__name__)

# MariaDB/MySQL client and server error numbers worth their own message.
_CANT_CONNECT = {2002, 2003, 2005, 2006, 2013}
_ACCESS_DENIED = {1044, 1045, 1698}
_UNKNOWN_DB = 1049


def _detail(exc: BaseException) -> str:
    args: tuple[Any, ...] = getattr(exc, "args", ())
    return str(args[1]) if len(args) > 1 else str(exc)


def connect(cfg: DbConfig) -> Any:
    """A MySQLdb connection (autocommit) with the accounting database selected."""
    import MySQLdb  # the MySQL client library: not loaded by a report through the service

    log.debug("connecting to %s", cfg.describe())
    try:
        conn = MySQLdb.connect(**cfg.connect_kwargs())
    except MySQLdb.OperationalError as exc:
        code = next(iter(exc.args), 0)  # MySQL's error number
        if code in _CANT_CONNECT:
            raise AccountingError(
                f"cannot reach the accounting database at {cfg.describe()}: {_detail(exc)}"
            ) from None
        if code in _ACCESS_DENIED:
            raise AccountingError(
                f"the accounting database at {cfg.describe()} refused the login "
                f"(wrong user or password?): {_detail(exc)}"
            ) from None
        if code == _UNKNOWN_DB:
            raise AccountingError(
                f"database {cfg.database!r} does not exist at {cfg.describe()}"
            ) from None
        raise AccountingError(
            f"cannot open the accounting database at {cfg.describe()}: {_detail(exc)}"
        ) from None
    except MySQLdb.Error as exc:
        raise AccountingError(
            f"cannot open the accounting database at {cfg.describe()}: {_detail(exc)}"
        ) from None
    try:
        conn.autocommit(True)
        cur = conn.cursor()
        cur.execute("SELECT DATABASE()")
        row = cur.fetchone()
        cur.close()
        if not row or not row[0]:
            conn.select_db(DEFAULT_DATABASE)
    except MySQLdb.Error as exc:
        conn.close()
        raise AccountingError(
            f"cannot use database {DEFAULT_DATABASE!r} at {cfg.describe()}: {_detail(exc)}"
        ) from None
    return conn
