"""``acbslurm report``: GPU usage straight from slurmdbd's MariaDB."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from typing import Any

import click

from acbslurm.accounting.grouping import GROUP_KEYS, Aggregator
from acbslurm.accounting.output import FORMATS, JSON_FORMAT, write_csv, write_json, write_table
from acbslurm.accounting.queries import Filters
from acbslurm.accounting.report import (
    ReportRequest,
    fill_groups,
    iter_jobs,
    resolve_user,
    server_summable,
)
from acbslurm.accounting.usage import DEFINITION_TEXT, DEFINITIONS, JobUsage
from acbslurm.slurm.states import normalize_state
from acbslurm.units import iso, parse_instant

DEFAULT_START = "now-30d"


def _states(values: tuple[str, ...]) -> frozenset[str]:
    out: set[str] = set()
    for value in values:
        for part in value.split(","):
            if not part.strip():
                continue
            try:
                out.add(normalize_state(part))
            except ValueError as exc:
                raise click.BadParameter(str(exc), param_hint="'--state'") from None
    return frozenset(out)


def _time(value: str, name: str, now: int) -> int:
    try:
        return parse_instant(value, now)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=f"'{name}'") from None


@click.command("report")
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
    type=click.Choice(("job", *GROUP_KEYS)),
    default="job",
    show_default=True,
    help="One line per job, or totals per user/account/partition/day.",
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
    type=click.IntRange(1, 65535),
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
def report(
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
    """
    from acbslurm.accounting.connection import connect
    from acbslurm.accounting.dbconfig import resolve_db_config
    from acbslurm.accounting.schema import detect, is_cluster_name
    from acbslurm.config import load_settings
    from acbslurm.errors import AccountingError

    now = int(time.time())
    win_start = _time(start, "--start", now)
    win_end = _time(end, "--end", now)
    if win_start >= win_end:
        raise click.BadParameter(
            f"window start {start!r} is not before end {end!r}", param_hint="'--start'"
        )
    uids: list[int] = []
    for u in users:
        try:
            uids.append(resolve_user(u))
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="'--user'") from None
    wanted_states = _states(states)
    if cluster and not is_cluster_name(cluster):
        raise click.BadParameter(
            f"{cluster!r} is not a Slurm cluster name (letters, digits, _)",
            param_hint="'--cluster'",
        )
    settings = load_settings()
    cfg = resolve_db_config(
        option_file=db_config,
        host=db_host,
        port=db_port,
        socket=db_socket,
        user=db_user,
        database=db_name,
        settings_db_config=settings.db_config,
    )
    conn = connect(cfg)
    try:
        schema = detect(conn, cluster or settings.cluster)
        if schema.gpu_tres_id is None:
            raise AccountingError(
                "gres/gpu is not a TRES in this database: slurm.conf needs "
                "AccountingStorageTRES=gres/gpu (jobs before that have no GPU counts)"
            )
        filters = Filters(
            start=win_start,
            end=win_end,
            uids=tuple(uids),
            accounts=tuple(accounts),
            partitions=tuple(partitions),
        )
        req = ReportRequest(
            filters=filters, now=now, definition=definition, by=by, states=wanted_states
        )
        if schema.gpu_util_recorded:
            util_note = "gres/gpuutil and gres/gpumem from the job steps (max over steps)"
        else:
            util_note = (
                f"not recorded (Slurm {schema.slurm_release}, schema {schema.version}: "
                "gres/gpuutil exists from Slurm 23.02 with acct_gather GPU sampling)"
            )
        meta: dict[str, Any] = {
            "format": JSON_FORMAT,
            "cluster": schema.cluster,
            "schema_version": schema.version,
            "slurm_release": schema.slurm_release,
            "definition": definition,
            "definition_text": DEFINITION_TEXT[definition],
            "by": by,
            "generated": iso(now),
            "now_unix": now,
            "window": {
                "start": iso(win_start),
                "end": iso(win_end),
                "start_unix": win_start,
                "end_unix": win_end,
            },
            "filters": {
                "users": list(users),
                "uids": uids,
                "accounts": list(accounts),
                "partitions": list(partitions),
                "states": sorted(wanted_states),
            },
            "gpu_tres_id": schema.gpu_tres_id,
            "gpu_utilization": {"recorded": schema.gpu_util_recorded, "note": util_note},
        }
        out = sys.stdout
        agg = Aggregator(by, definition)
        jobs: Iterable[JobUsage]
        if server_summable(req):
            # Slices of the selection run at once on extra connections (same config).
            fill_groups(conn, schema, req, agg, lambda: connect(cfg))
            jobs = ()
        else:
            jobs = iter_jobs(conn, schema, req)
        if as_json or fmt == "json":
            write_json(out, meta, jobs, agg)
        elif fmt == "csv":
            write_csv(out, jobs, agg)
        else:
            write_table(out, meta, jobs, agg)
        out.flush()
    finally:
        conn.close()
