"""Run a report: check the schema, stream the job rows, compute, hand jobs on.

A report costs a fixed number of queries whatever its size: four to check the schema,
one for the jobs (streamed with a server-side cursor, so memory stays flat), and on
Slurm 23.02+ schemas one more for the steps' GPU utilization.
"""

from __future__ import annotations

import pwd
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from acbslurm.accounting.grouping import Aggregator, Group
from acbslurm.accounting.queries import (
    GROUP_COLUMNS,
    Filters,
    Server,
    group_query,
    job_query,
    step_util_query,
)
from acbslurm.accounting.schema import Schema
from acbslurm.accounting.tres import tres_value
from acbslurm.accounting.usage import JobRow, JobUsage, compute, newest_rows
from acbslurm.errors import AccountingError

FETCH = 2000


@dataclass(frozen=True)
class ReportRequest:
    filters: Filters
    now: int
    definition: str = "sacct"
    by: str = "job"
    states: frozenset[str] = field(default_factory=frozenset)


class UserNames:
    """uid -> name: the association's user, else the passwd name, else the number."""

    def __init__(self) -> None:
        self._cache: dict[int, str] = {}

    def name(self, uid: int, assoc_user: str | None) -> str:
        if assoc_user:
            return assoc_user
        got = self._cache.get(uid)
        if got is None:
            try:
                got = pwd.getpwuid(uid).pw_name
            except KeyError:
                got = str(uid)
            self._cache[uid] = got
        return got


def resolve_user(text: str) -> int:
    """A --user value (name or uid) as a uid; ValueError when unknown."""
    if text.isdigit():
        return int(text)
    try:
        return pwd.getpwnam(text).pw_uid
    except KeyError:
        raise ValueError(
            f"unknown user {text!r} (give a login name of this host or a uid)"
        ) from None


def _stream(conn: Any, sql: str, params: list[Any]) -> Iterator[tuple[Any, ...]]:
    import MySQLdb
    import MySQLdb.cursors

    cur = conn.cursor(MySQLdb.cursors.SSCursor)
    try:
        cur.execute(sql, params)
        while True:
            batch = cur.fetchmany(FETCH)
            if not batch:
                break
            yield from batch
    except MySQLdb.Error as exc:
        raise AccountingError(f"reading the job table failed: {exc.args[-1]}") from None
    finally:
        cur.close()


def gpu_utilization(
    conn: Any, schema: Schema, f: Filters
) -> dict[int, tuple[float | None, float | None, float | None]]:
    """job_db_inx -> (max step ave gpuutil, max step max gpuutil, max step max gpumem)."""
    out: dict[int, tuple[float | None, float | None, float | None]] = {}
    if not schema.gpu_util_recorded:
        return out
    sql, params = step_util_query(schema, f)

    def mx(a: float | None, b: float | None) -> float | None:
        return b if a is None else a if b is None else max(a, b)

    for inx, ave, top in _stream(conn, sql, params):
        prev = out.get(int(inx), (None, None, None))
        out[int(inx)] = (
            mx(prev[0], tres_value(ave, schema.gpuutil_tres_id)),
            mx(prev[1], tres_value(top, schema.gpuutil_tres_id)),
            mx(prev[2], tres_value(top, schema.gpumem_tres_id)),
        )
    return out


def iter_jobs(conn: Any, schema: Schema, req: ReportRequest) -> Iterator[JobUsage]:
    """JobUsage records in job id order, filtered by state."""
    f = req.filters
    util = gpu_utilization(conn, schema, f)
    names = UserNames()
    sql, params = job_query(schema, f)
    rows: Iterator[JobRow] = (JobRow(*r) for r in _stream(conn, sql, params))
    if req.definition == "sacct":
        rows = newest_rows(rows)
    for row in rows:
        job = compute(
            row,
            schema.gpu_tres_id,
            req.definition,
            f.start,
            f.end,
            req.now,
            names.name(row.id_user, row.assoc_user),
        )
        if req.states and job.state not in req.states:
            continue
        u = util.get(row.job_db_inx)
        if u is not None:
            job.gpu_util_ave, job.gpu_util_max, job.gpu_mem_max = u
        yield job


def server_summable(req: ReportRequest) -> bool:
    """Grouped by user/account/partition without a state filter: let MariaDB sum."""
    return req.by in GROUP_COLUMNS and not req.states


def fill_groups(conn: Any, schema: Schema, req: ReportRequest, agg: Aggregator) -> None:
    """Per-group totals computed by the server (one query, one row per group)."""
    server = Server.parse(str(conn.get_server_info()))
    sql, params = group_query(schema, req.filters, req.by, req.definition, req.now, server)
    names = UserNames()
    for key, user, jobs, running, gpu_s, wait_sum, started in _stream(conn, sql, params):
        label = names.name(int(key), user) if req.by == "user" else str(key or "")
        g = agg.groups.get(label) or Group(label)
        agg.groups[label] = g
        for target in (g, agg.total):
            target.jobs += int(jobs)
            target.running += int(running or 0)
            target.gpu_seconds += int(gpu_s or 0)
            target.wait_sum += int(wait_sum or 0)
            target.waited += int(started or 0)
