"""``acbslurm report``: GPU usage straight from slurmdbd's MariaDB."""

from __future__ import annotations

import sys

import click

from acbslurm.accounting.gpuseconds import DEFINITIONS
from acbslurm.accounting.options import BY_CHOICES, DEFAULT_START, OptionError, ReportOptions
from acbslurm.accounting.output import FORMATS
from acbslurm.clitypes import AsciiInt

# `report` and `report serve` each import what they alone need in their function.


@click.group("report", invoke_without_command=True)
@click.option(
    "-u", "--user", "users", multiple=True, help="Only this user (name or uid); repeatable."
)
@click.option("-A", "--account", "accounts", multiple=True, help="Only this account; repeatable.")
@click.option(
    "-p", "--partition", "partitions", multiple=True, help="Only this partition; repeatable."
)
@click.option(
    "-S",
    "--start",
    default=DEFAULT_START,
    show_default=True,
    help="Window start: YYYY-MM-DD[THH:MM[:SS]], @UNIX, now, now-N[s|m|h|d|w].",
)
@click.option(
    "-E", "--end", default="now", show_default=True, help="Window end (same forms as --start)."
)
@click.option(
    "-s",
    "--state",
    "states",
    multiple=True,
    help="Only jobs in this state (COMPLETED, FAILED, CA, R...); repeatable or comma-separated.",
)
@click.option(
    "--by",
    type=click.Choice(BY_CHOICES),
    default="job",
    show_default=True,
    help="One line per job, or totals per user/account/partition/day, or per key name of "
    "the pools' keys (requests, tokens, GPU-seconds: docs/serve.md, Usage).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="table",
    show_default=True,
    help="Output format (json is documented in docs/report.md).",
)
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
@click.option(
    "--definition",
    type=click.Choice(DEFINITIONS),
    default="sacct",
    show_default=True,
    help=(
        "GPU-seconds as sacct counts them (newest row, minus suspended) "
        "or as sreport does (every row, clipped to the window)."
    ),
)
@click.option(
    "--cluster",
    default=None,
    help="Cluster name in slurmdbd [env ACBSLURM_CLUSTER; settings 'cluster'; the only one].",
)
@click.option(
    "--db-config",
    default=None,
    type=click.Path(dir_okay=False),
    help="MySQL option file with host/port/socket/user/password/database [env ACBSLURM_DB_CONFIG].",
)
@click.option("--db-host", default=None, help="Database host [env ACBSLURM_DB_HOST].")
@click.option(
    "--db-port",
    default=None,
    type=AsciiInt(1, 65535),
    help="Database TCP port [env ACBSLURM_DB_PORT].",
)
@click.option("--db-socket", default=None, help="Database unix socket [env ACBSLURM_DB_SOCKET].")
@click.option(
    "--db-user",
    default=None,
    help=(
        "Database user [env ACBSLURM_DB_USER]; the password comes only from "
        "the option file or ACBSLURM_DB_PASSWORD."
    ),
)
@click.option(
    "--db-name", default=None, help="Database name [env ACBSLURM_DB_NAME; default slurm_acct_db]."
)
@click.pass_context
def report(
    ctx: click.Context,
    users: tuple[str, ...],
    accounts: tuple[str, ...],
    partitions: tuple[str, ...],
    start: str,
    end: str,
    states: tuple[str, ...],
    by: str,
    fmt: str,
    as_json: bool,
    definition: str,
    cluster: str | None,
    db_config: str | None,
    db_host: str | None,
    db_port: int | None,
    db_socket: str | None,
    db_user: str | None,
    db_name: str | None,
) -> None:
    """GPU-hours per job, user, account, partition or day, read from slurmdbd's database.

    Default GPU-seconds definition is sacct's (gres/gpu x ElapsedRaw of the newest row of
    each job); --definition sreport counts every row clipped to the window. Running jobs
    count up to now and are marked.

    A user who may not read the database credentials gets the report through the report
    service (`acbslurm report serve`, setting report_socket), with their own rights:
    what sacct would show them.
    """
    if ctx.invoked_subcommand is not None:
        return
    from acbslurm.accounting.make_report import report as run_report

    opts = ReportOptions(
        users=users,
        accounts=accounts,
        partitions=partitions,
        start=start,
        end=end,
        states=states,
        by=by,
        fmt="json" if as_json else fmt,
        definition=definition,
        cluster=cluster,
        db_config=db_config,
        db_host=db_host,
        db_port=db_port,
        db_socket=db_socket,
        db_user=db_user,
        db_name=db_name,
    )
    try:
        run_report(opts, sys.stdout)
    except OptionError as exc:
        raise click.BadParameter(str(exc), param_hint=f"'{exc.option}'") from None


@report.command("serve")
@click.option(
    "--socket",
    "socket_path",
    default=None,
    help="Unix socket to listen on [setting report_socket; /run/acbslurm/report.sock].",
)
@click.option(
    "--private-data",
    default=None,
    help="slurmdbd's PrivateData: auto (ask sacctmgr), none, jobs... "
    "[setting report_private_data; auto].",
)
def serve(socket_path: str | None, private_data: str | None) -> None:
    """Serve reports to every user, with the rights sacct gives them (runs as a user who
    can read the database option file; SO_PEERCRED tells who asks)."""
    from acbslurm.accounting.service import serve as run_service
    from acbslurm.config import load_settings

    settings = load_settings()
    path = socket_path or settings.report_socket
    run_service(
        path,
        private_data or settings.report_private_data,
        on_ready=lambda: click.echo(f"report service: listening on {path}", err=True),
    )
