"""The sandbox's private MariaDB: own datadir, socket and port.

Passwords travel on stdin to the SQL client (never argv) and live in mode-600 files.
"""

from __future__ import annotations

import os
import pwd
import shutil
import time

from acbslurm import proc
from acbslurm.errors import CommandError, SetupError
from acbslurm.sandbox.layout import Layout, Params
from acbslurm.sandbox.procs import Proc, spawn, wait_for
from acbslurm.slurm.versions import config_choices

DB_NAME = "slurm_acct_db"
READONLY_USER = "acbslurm_ro"


def _chown_tree(path: os.PathLike[str], user: str) -> None:
    pw = pwd.getpwnam(user)
    os.chown(path, pw.pw_uid, pw.pw_gid)


def prepare(layout: Layout) -> None:
    layout.mysql_socket.parent.mkdir(parents=True, exist_ok=True)
    _chown_tree(layout.mysql_socket.parent, "mysql")
    if (layout.mysql_data / "mysql").is_dir():
        return
    layout.mysql_data.mkdir(parents=True, exist_ok=True)
    _chown_tree(layout.mysql_data, "mysql")
    layout.mysql_data.chmod(0o700)
    installer = shutil.which("mariadb-install-db") or "mysql_install_db"
    proc.run(
        [
            installer,
            "--no-defaults",
            "--user=mysql",
            f"--datadir={layout.mysql_data}",
            "--auth-root-authentication-method=socket",
            "--skip-test-db",
        ],
        timeout=180,
    )


def start(layout: Layout, params: Params, marker: str) -> Proc:
    log = layout.log_file("mariadb")
    p = spawn(
        "mariadb",
        [
            "/usr/sbin/mariadbd",
            "--no-defaults",
            "--user=mysql",
            f"--datadir={layout.mysql_data}",
            f"--socket={layout.mysql_socket}",
            f"--port={params.mariadb_port}",
            "--bind-address=127.0.0.1",
            f"--pid-file={layout.mysql_socket.parent}/mariadbd.pid",
            "--skip-name-resolve",
            # What slurmdbd asks of its database (differs by release).
            *(f"--{k}={v}" for k, v in config_choices(params.slurm_release).mariadb_settings),
        ],
        run_dir=layout.run,
        log_file=log,
        marker=marker,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
    )
    wait_for("mariadb", lambda: ready(layout), proc=p, log_file=log, timeout=60)
    return p


def sql(layout: Layout, statements: str, timeout: float = 30) -> str:
    """Run SQL as MariaDB's root over the private socket (unix-socket auth)."""
    return proc.run(
        ["mariadb", "--no-defaults", f"--socket={layout.mysql_socket}", "-u", "root", "-N", "-B"],
        input=statements,
        timeout=timeout,
    ).stdout


def ready(layout: Layout) -> bool:
    return sql(layout, "SELECT 1;", timeout=5).strip() == "1"


def _quote(value: str) -> str:
    # Only for our own generated passwords (hex): SQL string literal quoting.
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


def create_users(layout: Layout, slurm_password: str, readonly_password: str) -> None:
    """The slurmdbd user (all on its DB) and a read-only user for `acbslurm report`."""
    stmts = [f"CREATE DATABASE IF NOT EXISTS {DB_NAME};"]
    for host in ("127.0.0.1", "localhost"):
        stmts += [
            f"CREATE USER IF NOT EXISTS 'slurm'@'{host}' IDENTIFIED BY {_quote(slurm_password)};",
            f"ALTER USER 'slurm'@'{host}' IDENTIFIED BY {_quote(slurm_password)};",
            f"GRANT ALL ON {DB_NAME}.* TO 'slurm'@'{host}';",
            f"CREATE USER IF NOT EXISTS '{READONLY_USER}'@'{host}' "
            f"IDENTIFIED BY {_quote(readonly_password)};",
            f"ALTER USER '{READONLY_USER}'@'{host}' IDENTIFIED BY {_quote(readonly_password)};",
            f"GRANT SELECT ON {DB_NAME}.* TO '{READONLY_USER}'@'{host}';",
        ]
    stmts.append("FLUSH PRIVILEGES;")
    try:
        sql(layout, "\n".join(stmts))
    except CommandError as exc:
        # MariaDB quotes the statement near an error: keep the passwords out of it.
        text = str(exc)
        for secret in (slurm_password, readonly_password):
            text = text.replace(secret, "***")
        raise SetupError(f"sandbox: creating the database users failed: {text}") from None


def wait_gone(layout: Layout, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while layout.mysql_socket.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
