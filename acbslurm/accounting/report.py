"""Run a report: check the schema, stream the job rows, compute, hand jobs on.

A report costs a fixed number of queries whatever its size: four to check the schema,
one for the jobs (streamed with a server-side cursor, so memory stays flat), and on
Slurm 23.02+ schemas one more for the steps' GPU utilization. Server-summed reports
(``--by user|account|partition``) run as ``PARTS`` queries at once on as many
connections, plus one small correction query when a job id's rows lie in two of them.
"""

from __future__ import annotations

import logging
import pwd
import threading
from collections.abc import Callable, Iterator
from typing import Any

from acbslurm.accounting.gpuseconds import JobRow, JobUsage, compute, newest_rows, sacct_elapsed
from acbslurm.accounting.grouping import Aggregator, Group, LeftOut
from acbslurm.accounting.live import LiveDevices
from acbslurm.accounting.queries import (
    GROUP_COLUMNS,
    Filters,
    Server,
    group_query,
    job_query,
    overcount_query,
    slices,
    split_points,
    step_util_query,
)
from acbslurm.accounting.schema import Schema
from acbslurm.accounting.tres import tres_count, tres_value
from acbslurm.errors import AccountingError, short_repr
from acbslurm.units import is_ascii_int
from acbslurm.values import field, frozen, mutable

FETCH = 2000
log = logging.getLogger(__name__)


@frozen
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


UID_MAX = 2**32 - 2


def resolve_user(text: str) -> int:
    """A --user value (name or uid) as a uid; ValueError when unknown or out of range."""
    if is_ascii_int(text):
        # uid_t is 32 bits and (uid_t)-1 means "no uid": a larger number names nobody,
        # and would silently match no row. Its length is checked before int() reads it.
        if len(text.lstrip("0")) > len(str(UID_MAX)) or int(text) > UID_MAX:
            raise ValueError(f"uid {short_repr(text, 40)} is out of range (0 to {UID_MAX})")
        return int(text)
    try:
        return pwd.getpwnam(text).pw_uid
    except KeyError:
        raise ValueError(
            f"unknown user {text!r} (give a login name of this host or a uid)"
        ) from None


def _stream(conn: Any, sql: str, params: list[Any]) -> Iterator[tuple[Any, ...]]:
    import MySQLdb  # the MySQL client library: not loaded by a report through the service
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


def iter_jobs(
    conn: Any, schema: Schema, req: ReportRequest, left_out: LeftOut | None = None
) -> Iterator[JobUsage]:
    """JobUsage records in job id order, filtered by state; with sacct's definition, the
    earlier runs it leaves out are counted into ``left_out``."""
    f = req.filters
    util = gpu_utilization(conn, schema, f)
    names = UserNames()
    live = LiveDevices()
    sql, params = job_query(schema, f)
    rows: Iterator[JobRow] = (JobRow(*r) for r in _stream(conn, sql, params))
    if req.definition == "sacct":
        rows = newest_rows(rows, _counter(left_out, schema.gpu_tres_id, req.now))
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
        if job.running and job.gpus and not job.gpu_devices:
            job.gpu_devices = live.devices(row.id_job)
        u = util.get(row.job_db_inx)
        if u is not None:
            job.gpu_util_ave, job.gpu_util_max, job.gpu_mem_max = u
        yield job


def _counter(
    left_out: LeftOut | None, gpu_tres_id: int | None, now: int
) -> Callable[[JobRow], None] | None:
    """What ``newest_rows`` calls for each earlier run it drops: counted in ``left_out``."""
    if left_out is None:
        return None
    left_out.counted = True

    def count(row: JobRow) -> None:
        left_out.runs += 1
        left_out.gpu_seconds += tres_count(row.tres_alloc, gpu_tres_id) * sacct_elapsed(row, now)[0]

    return count


def server_summable(req: ReportRequest) -> bool:
    """Grouped by user/account/partition without a state filter: let MariaDB sum."""
    return req.by in GROUP_COLUMNS and not req.states


# Slices run at once on this many connections: MariaDB runs each query on one thread.
PARTS = 2


@mutable
class GroupRun:
    """How a server-summed report ran: slices, job ids corrected, fallback taken."""

    slices: int = 1
    straddling: int = 0
    fallback: bool = False


# Per group key: [assoc user, jobs, running, gpu_s, wait_s, started].
Sums = dict[Any, list[Any]]


def _fetch(conn: Any, sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
    return list(_stream(conn, sql, params))


def _add_rows(sums: Sums, rows: list[tuple[Any, ...]], sign: int = 1) -> None:
    for key, user, *figures in rows:
        acc = sums.get(key)
        if acc is None:
            acc = sums[key] = [None, 0, 0, 0, 0, 0]
        # MAX(t2.user) over all slices (case-blind, like the server's collation).
        if user is not None and (acc[0] is None or str(user).lower() > str(acc[0]).lower()):
            acc[0] = user
        for i, value in enumerate(figures[:5], start=1):
            acc[i] += sign * int(value or 0)


def _run_parallel(
    conn: Any, connect_more: Callable[[], Any], queries: list[tuple[str, list[Any]]]
) -> list[list[tuple[Any, ...]]]:
    """Run the first query here and the others each on a new connection of its own.

    A slice whose connection cannot be opened (say, the account's connection limit)
    runs here afterwards instead: slower, same numbers.
    """
    results: list[list[tuple[Any, ...]] | None] = [None for _ in queries]
    errors: list[BaseException] = []

    def other(i: int) -> None:
        try:
            c = connect_more()
        except AccountingError as exc:
            log.debug("no extra connection (%s): slice %d runs after the first", exc, i)
            return
        try:
            results[i] = _fetch(c, *queries[i])
        except BaseException as exc:  # handed to the main thread below
            errors.append(exc)
        finally:
            c.close()

    threads = [threading.Thread(target=other, args=(i,)) for i in range(1, len(queries))]
    for t in threads:
        t.start()
    try:
        results[0] = _fetch(conn, *queries[0])
    finally:
        for t in threads:
            t.join()
    if errors:
        raise errors[0]
    return [r if r is not None else _fetch(conn, *q) for r, q in zip(results, queries, strict=True)]


def _id_lists(rows: list[tuple[Any, ...]]) -> set[str] | None:
    """The job ids (as text) a slice counted as newest; None if a list came back cut
    short (shorter than the length the server computed for it)."""
    ids: set[str] = set()
    for row in rows:
        want, text = int(row[7] or 0), row[8]
        if isinstance(text, bytes):
            text = text.decode("ascii")
        if (len(text) + 1 if text else 0) != want:
            return None
        if text:
            ids.update(text.split(","))
    return ids


def _straddling(per_slice: list[set[str]]) -> list[int]:
    """Job ids found in more than one slice."""
    seen: set[str] = set()
    twice: set[str] = set()
    for ids in per_slice:
        twice |= seen.intersection(ids)
        seen |= ids
    return sorted(int(x) for x in twice)


def server_sums(
    conn: Any,
    schema: Schema,
    req: ReportRequest,
    connect_more: Callable[[], Any] | None = None,
    points: list[int] | None = None,
) -> tuple[Sums, GroupRun]:
    """Per-group sums computed by the server: one query, or, when ``connect_more`` can
    open further connections (MariaDB), ``PARTS`` slices of the selection by end time
    run at once and added up here.

    sacct's newest-row rule is per job id, and a requeued job's rows may lie in two
    slices: each slice returns the ids it counted, and for the ids found in more than
    one a last query (through the id_job key) gives the surplus, which is subtracted.
    ``points`` forces the split points (tests use it to put a requeued job's rows in
    two slices).
    """
    server = Server.parse(str(conn.get_server_info()))
    if points is None:  # sliced only with further connections, on MariaDB
        sliced = connect_more is not None and server.mariadb
        points = split_points(req.filters, req.now, PARTS) if sliced else []
    run = GroupRun()
    if not points or connect_more is None:
        return _unsplit_sums(conn, schema, req, server), run
    return _sliced_sums(conn, schema, req, server, connect_more, points, run), run


def _unsplit_sums(conn: Any, schema: Schema, req: ReportRequest, server: Server) -> Sums:
    """The per-group sums of one query over the whole selection."""
    sums: Sums = {}
    query = group_query(schema, req.filters, req.by, req.definition, req.now, server)
    _add_rows(sums, _fetch(conn, *query))
    return sums


# complexity: each step needs the one before (the slices' rows, their id lists, the fallback when a
# list was cut, the surplus query on the same connection), and the fallback returns early; split,
# the results would be passed from helper to helper.
def _sliced_sums(
    conn: Any,
    schema: Schema,
    req: ReportRequest,
    server: Server,
    connect_more: Callable[[], Any],
    points: list[int],
    run: GroupRun,
) -> Sums:
    """The per-group sums of the slices at ``points`` run at once, less the surplus of
    the jobs found in two slices (noted in ``run``)."""
    f = req.filters
    with_ids = req.definition == "sacct" and server.window_functions
    queries = [
        group_query(schema, f, req.by, req.definition, req.now, server, part, with_ids)
        for part in slices(f, points)
    ]
    results = _run_parallel(conn, connect_more, queries)
    run.slices = len(queries)
    # The job ids counted in more than one slice's result; None when a result's id
    # list was cut.
    straddling: list[int] | None = []
    if with_ids:
        lists = [_id_lists(rows) for rows in results]
        cut = any(ids is None for ids in lists)
        straddling = None if cut else _straddling([ids for ids in lists if ids is not None])
    if straddling is None:
        # A list was cut (a result over max_allowed_packet): ask once, unsplit.
        run.fallback = True
        return _unsplit_sums(conn, schema, req, server)
    sums: Sums = {}
    for rows in results:
        _add_rows(sums, rows)
    if straddling:
        run.straddling = len(straddling)
        sql, params = overcount_query(schema, f, req.by, req.now, server, points, straddling)
        _add_rows(sums, _fetch(conn, sql, params), sign=-1)
    # A group whose only counted row was a surplus one is not in the selection's result.
    return {k: v for k, v in sums.items() if v[1] > 0}


def fill_groups(
    conn: Any,
    schema: Schema,
    req: ReportRequest,
    agg: Aggregator,
    connect_more: Callable[[], Any] | None = None,
) -> GroupRun:
    """Per-group totals computed by the server (one row per group comes back)."""
    sums, run = server_sums(conn, schema, req, connect_more)
    names = UserNames()
    for key, (user, jobs, running, gpu_s, wait_sum, started) in sums.items():
        label = names.name(int(key), user) if req.by == "user" else str(key or "")
        g = agg.groups.get(label) or Group(label)
        agg.groups[label] = g
        for target in (g, agg.total):
            target.jobs += jobs
            target.running += running
            target.gpu_seconds += gpu_s
            target.wait_sum += wait_sum
            target.waited += started
    return run
