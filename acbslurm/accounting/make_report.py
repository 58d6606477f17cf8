"""`acbslurm report` end to end: options -> database -> one format on a stream.

``run_report`` checks the options before it reads any setting or opens a connection,
so a typo costs no database round trip.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import Any, TextIO

from acbslurm.accounting.bykey import write_by_key
from acbslurm.accounting.connection import connect
from acbslurm.accounting.dbconfig import resolve_db_config
from acbslurm.accounting.gpuseconds import DEFINITION_TEXT, JobUsage
from acbslurm.accounting.grouping import Aggregator
from acbslurm.accounting.html import write_html
from acbslurm.accounting.options import ReportOptions, Selection, resolve
from acbslurm.accounting.output import JSON_FORMAT, write_csv, write_json, write_table
from acbslurm.accounting.queries import Filters
from acbslurm.accounting.remote import report_via_service
from acbslurm.accounting.report import ReportRequest, fill_groups, iter_jobs, server_summable
from acbslurm.accounting.rights import Rights, rights_for
from acbslurm.accounting.schema import Schema, detect
from acbslurm.config import load_settings
from acbslurm.errors import AccountingError
from acbslurm.units import iso
from acbslurm.values import frozen, replace


@frozen
class Viewer:
    """Who asked, for the report service: their rights are applied in SQL."""

    uid: int
    private: bool  # slurmdbd's PrivateData hides other users' jobs


def report_request(
    opts: ReportOptions, sel: Selection, now: int, rights: Rights | None = None
) -> ReportRequest:
    limited = rights is not None and not rights.all_jobs
    filters = Filters(
        start=sel.start,
        end=sel.end,
        uids=sel.uids,
        accounts=tuple(opts.accounts),
        partitions=tuple(opts.partitions),
        visible_uid=rights.uid if limited and rights else None,
        visible_accounts=rights.accounts if limited and rights else (),
    )
    return ReportRequest(
        filters=filters, now=now, definition=opts.definition, by=opts.by, states=sel.states
    )


def _by_key(
    conn: Any,
    schema: Schema,
    req: ReportRequest,
    rights: Rights | None,
    fmt: str,
    out: TextIO,
    meta: dict[str, Any],
) -> None:
    """``--by key``: the viewer's pools, and their own key's rows in others' pools."""
    theirs: Iterable[JobUsage] = ()
    if rights is not None and not rights.all_jobs and rights.user:
        # A viewer who sees only some jobs: the other pool jobs of the window too (their
        # rows of the viewer's key name are theirs to see, the rest is not read out).
        f = replace(req.filters, visible_uid=None, visible_accounts=(), pool_usage_only=True)
        seen = set(rights.accounts)
        theirs = (
            j
            for j in iter_jobs(conn, schema, replace(req, filters=f))
            if j.uid != rights.uid and j.account not in seen
        )
        meta["visible"] += f"; in other users' pool jobs, the rows of key {rights.user}"
    name = rights.user if rights else ""
    write_by_key(fmt, out, meta, iter_jobs(conn, schema, req), theirs, name)
    out.flush()


def utilization_note(schema: Schema) -> str:
    if schema.gpu_util_recorded:
        return "gres/gpuutil and gres/gpumem from the job steps (max over steps)"
    return (
        f"not recorded (Slurm {schema.slurm_release}, schema {schema.version}: "
        "gres/gpuutil exists from Slurm 23.02 with acct_gather GPU sampling)"
    )


def metadata(opts: ReportOptions, sel: Selection, schema: Schema, now: int) -> dict[str, Any]:
    """The ``report`` object of the JSON output (docs/report.md); the table's header."""
    return {
        "format": JSON_FORMAT,
        "cluster": schema.cluster,
        "schema_version": schema.version,
        "slurm_release": schema.slurm_release,
        "definition": opts.definition,
        "definition_text": DEFINITION_TEXT[opts.definition],
        "by": opts.by,
        "generated": iso(now),
        "now_unix": now,
        "window": {
            "start": iso(sel.start),
            "end": iso(sel.end),
            "start_unix": sel.start,
            "end_unix": sel.end,
        },
        "filters": {
            "users": list(opts.users),
            "uids": list(sel.uids),
            "accounts": list(opts.accounts),
            "partitions": list(opts.partitions),
            "states": sorted(sel.states),
        },
        "gpu_tres_id": schema.gpu_tres_id,
        "gpu_utilization": {"recorded": schema.gpu_util_recorded, "note": utilization_note(schema)},
    }


def run_report(
    opts: ReportOptions, out: TextIO, *, now: int | None = None, viewer: Viewer | None = None
) -> None:
    """Write the report ``opts`` asks for to ``out`` (with ``viewer``'s rights, if given).

    Raises ``OptionError`` for a bad option, ``ConfigError`` for bad settings and
    ``AccountingError`` when the database cannot be read or has no GPU counts.
    """
    now = int(time.time()) if now is None else now
    sel = resolve(opts, now)
    settings = load_settings()
    cfg = resolve_db_config(
        option_file=opts.db_config,
        host=opts.db_host,
        port=opts.db_port,
        socket=opts.db_socket,
        user=opts.db_user,
        database=opts.db_name,
        settings_db_config=settings.db_config,
    )
    conn = connect(cfg)
    try:
        schema = detect(conn, opts.cluster or settings.cluster)
        if schema.gpu_tres_id is None:
            raise AccountingError(
                "gres/gpu is not a TRES in this database: slurm.conf needs "
                "AccountingStorageTRES=gres/gpu (jobs before that have no GPU counts)"
            )
        rights = None
        if viewer is not None:
            rights = rights_for(conn, schema, viewer.uid, viewer.private)
        req = report_request(opts, sel, now, rights)
        meta = metadata(opts, sel, schema, now)
        if rights is not None:
            meta["visible"] = rights.describe()
        if opts.by == "key":
            _by_key(conn, schema, req, rights, opts.fmt, out, meta)
            return
        agg = Aggregator(opts.by, opts.definition)
        jobs: Iterable[JobUsage]
        if server_summable(req) and opts.fmt != "html":  # the page draws every job
            # Slices of the selection run at once on extra connections (same config).
            fill_groups(conn, schema, req, agg, lambda: connect(cfg))
            jobs = ()
        else:
            jobs = iter_jobs(conn, schema, req, agg.left_out)
        _write(opts.fmt, out, meta, jobs, agg)
        out.flush()
    finally:
        conn.close()


def _write(
    fmt: str, out: TextIO, meta: dict[str, Any], jobs: Iterable[JobUsage], agg: Aggregator
) -> None:
    """The report in format ``fmt`` (json, html, csv, else the table)."""
    if fmt == "json":
        write_json(out, meta, jobs, agg)
    elif fmt == "html":
        write_html(out, meta, jobs, agg)
    elif fmt == "csv":
        write_csv(out, jobs, agg)
    else:
        write_table(out, meta, jobs, agg)


def report(opts: ReportOptions, out: TextIO) -> None:
    """`acbslurm report`: straight from the database when this user can read its
    credentials (or names a database), else through the report service."""
    resolve(opts, int(time.time()))  # a bad option is refused here, before any connection
    settings = load_settings()
    # This user reads the database itself when it names one (on the command line or in
    # ACBSLURM_DB_*), or can read the option file.
    named = (opts.db_config, opts.db_host, opts.db_port, opts.db_socket, opts.db_user)
    option_file = os.environ.get("ACBSLURM_DB_CONFIG") or settings.db_config
    direct = (
        any(v not in (None, "") for v in named)
        or any(k.startswith("ACBSLURM_DB_") and k != "ACBSLURM_DB_CONFIG" for k in os.environ)
        or (bool(option_file) and os.access(option_file, os.R_OK))
    )
    if not direct and os.path.exists(settings.report_socket):
        report_via_service(settings.report_socket, opts, out)
    else:
        run_report(opts, out)
