"""The report's SQL: fixed statements, values always passed as parameters.

Only the per-cluster table names (validated against cluster_table) and the number of
``%s`` placeholders (an ``IN (...)`` list, the split points of a sliced report) vary; no
user-supplied text is ever spliced into a statement. The WHERE clause is sacct's time
filter, which lets MariaDB use the job table's ``sacct_def2 (id_user, time_end,
time_eligible)`` index for user reports and ``rollup2 (time_end, time_eligible)`` for
all-user reports; a slice of it (``slices``) is a narrower range of the same index.
"""

from __future__ import annotations

from typing import Any

from acbslurm.accounting.schema import Schema
from acbslurm.slurm.states import JOB_RESIZING, JOB_REVOKED
from acbslurm.slurm.usage_history import PREFIX as USAGE_WORD
from acbslurm.values import frozen

# Order matters: usage.JobRow is built positionally from these.
JOB_SELECT = (
    "t1.job_db_inx",
    "t1.id_job",
    "t1.id_array_job",
    "t1.id_array_task",
    "t1.array_task_str",
    "t1.id_user",
    "t1.account",
    "t1.`partition`",
    "t1.state",
    "t1.time_submit",
    "t1.time_eligible",
    "t1.time_start",
    "t1.time_end",
    "t1.time_suspended",
    "t1.tres_alloc",
    "t2.user",
    "t1.admin_comment",
    "t1.system_comment",
)


@frozen
class Filters:
    start: int
    end: int
    uids: tuple[int, ...] = ()
    accounts: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()
    # Who may see what (accounting/rights.py): None sees all; else only jobs of this uid
    # and of these accounts. Applied in SQL, so other rows never leave the database.
    visible_uid: int | None = None
    visible_accounts: tuple[str, ...] = ()
    # Only jobs whose AdminComment has a pool's or broker's usage (report --by key).
    pool_usage_only: bool = False


def _in(column: str, values: tuple[Any, ...], params: list[Any]) -> str:
    params.extend(values)
    return f" AND {column} IN ({', '.join(['%s'] * len(values))})"


# A slice of the selection by end time: rows that ended in [lo, hi), or, with hi None,
# rows that ended at lo or later plus the unfinished ones (time_end = 0).
Slice = tuple[int, int | None]


def where_clause(f: Filters, part: Slice | None = None) -> tuple[str, list[Any]]:
    """sacct's selection: eligible before the window ends, not ended before it starts.

    With ``part``, only that slice of it (see ``slices``).
    """
    params: list[Any] = [JOB_REVOKED, f.end]
    sql = (
        "WHERE t1.deleted = 0 AND t1.state != %s"
        " AND t1.time_eligible != 0 AND t1.time_eligible < %s"
    )
    lo, hi = part if part is not None else (f.start, None)
    if hi is None:
        sql += " AND (t1.time_end >= %s OR t1.time_end = 0)"
        params.append(lo)
    else:
        sql += " AND t1.time_end >= %s AND t1.time_end < %s"
        params += [lo, hi]
    if f.uids:
        sql += _in("t1.id_user", f.uids, params)
    if f.accounts:
        sql += _in("t1.account", f.accounts, params)
    if f.partitions:
        sql += _in("t1.`partition`", f.partitions, params)
    if f.pool_usage_only:
        # the epilog's word is in the SystemComment, in the AdminComment before
        sql += " AND (t1.system_comment LIKE %s OR t1.admin_comment LIKE %s)"
        params += [f"%{USAGE_WORD}%"] * 2
    if f.visible_uid is not None:
        sql += " AND (t1.id_user = %s"
        params.append(f.visible_uid)
        if f.visible_accounts:
            sql += _in("t1.account", f.visible_accounts, params).replace(" AND", " OR", 1)
        sql += ")"
    return sql, params


def split_points(f: Filters, now: int, parts: int) -> list[int]:
    """End times that cut the window into ``parts`` equal spans (none if too short)."""
    lo, hi = max(f.start, 1), min(f.end, now)
    if parts < 2 or hi - lo < parts:
        return []
    return [lo + (hi - lo) * i // parts for i in range(1, parts)]


def slices(f: Filters, points: list[int]) -> list[Slice]:
    """Disjoint slices whose union is the whole selection: ended in [start, p1), ...,
    [p(n-1), pn), and ended at pn or later or not ended. Every row is in exactly one."""
    lo = max(f.start, 1)
    if any(b <= a for a, b in zip([lo, *points], points, strict=False)):
        # The caller computes the points from the checked window: a bug, not user input.
        raise ValueError(f"split points {points} must rise above the window start {lo}")
    edges: list[int | None] = [*points, None]
    out: list[Slice] = []
    for hi in edges:
        out.append((lo, hi))
        lo = hi if hi is not None else lo
    return out


def job_query(schema: Schema, f: Filters) -> tuple[str, list[Any]]:
    where, params = where_clause(f)
    # Table names come from Schema (validated); every value is a %s parameter.
    parts = (
        "SELECT",
        ", ".join(JOB_SELECT),
        "FROM",
        schema.table("job_table"),
        "AS t1 LEFT JOIN",
        schema.table("assoc_table"),
        "AS t2 ON t1.id_assoc = t2.id_assoc",
        where,
        "ORDER BY t1.id_job, t1.time_submit DESC",
    )
    return " ".join(parts), params


def step_util_query(schema: Schema, f: Filters) -> tuple[str, list[Any]]:
    """Per-step GPU usage strings of the selected jobs (schema 13+ only)."""
    where, params = where_clause(f)
    parts = (
        "SELECT s.job_db_inx, s.tres_usage_in_ave, s.tres_usage_in_max FROM",
        schema.table("step_table"),
        "AS s JOIN",
        schema.table("job_table"),
        "AS t1 ON s.job_db_inx = t1.job_db_inx",
        where,
        "AND s.deleted = 0",
    )
    return " ".join(parts), params


# Grouped reports are summed by the server (one row per group comes back): the same
# selection as job_query, the same arithmetic as gpuseconds.py, written in SQL. Signed casts
# because the time columns are unsigned and differences may be negative.
_S = "CAST({} AS SIGNED)"
# gres/gpu count of tres_alloc ("1=2,2=2048,1001=2"): the text after the last ",ID=";
# the ",ID=0," put in front makes a job without GPUs read 0 (ids occur once per string).
_GPUS = (
    "CAST(SUBSTRING_INDEX(SUBSTRING_INDEX(CONCAT(',', %s, '=0,', t1.tres_alloc),"
    " CONCAT(',', %s, '='), -1), ',', 1) AS UNSIGNED)"
)
_SACCT_START = (
    "IF(t1.time_end > 0 AND (t1.time_start = 0 OR t1.time_start > t1.time_end), {te}, {ts})"
)
_SACCT_ELAPSED = (
    "IF(t1.time_start = 0 AND t1.time_end = 0, 0, GREATEST(IF(t1.time_end > 0, {te}, %s)"
    " - ({st}) - IF(t1.state = 2, %s - {su}, {su}), 0))"
)
_SREPORT_ELAPSED = (
    "IF(t1.time_start = 0, 0,"
    " GREATEST(LEAST(IF(t1.time_end > 0, {te}, %s), %s, %s) - GREATEST({ts}, %s), 0))"
)
GROUP_COLUMNS = {"user": "t1.id_user", "account": "t1.account", "partition": "t1.`partition`"}


@frozen
class Server:
    """What the database server can do, from the connection handshake (no query)."""

    mariadb: bool
    version: tuple[int, int]

    @classmethod
    def parse(cls, info: str) -> Server:
        """``get_server_info()`` text such as ``10.11.6-MariaDB-0+deb12u1`` or ``8.0.36``."""
        mariadb = "mariadb" in info.lower()
        if mariadb and info.startswith("5.5.5-"):
            info = info[6:]  # old MariaDB servers pose as 5.5.5 for old clients
        nums = info.split("-", 1)[0].split(".")
        try:
            version = (int(nums[0]), int(nums[1]))
        except (IndexError, ValueError):
            version = (0, 0)
        return cls(mariadb=mariadb, version=version)

    @property
    def window_functions(self) -> bool:
        """ROW_NUMBER() OVER: MariaDB 10.2+, MySQL 8.0+."""
        return self.version >= ((10, 2) if self.mariadb else (8, 0))


# Rowid-ordered index scans (fetch the rows in primary-key order, not index order):
# MariaDB leaves them off by default; they cut the row lookups of a report by a third.
# (SET STATEMENT changes nothing in the session; see _prefix.)


def _row_figures(
    schema: Schema, by: str, definition: str, now: int, f: Filters
) -> tuple[str, list[Any]]:
    """Per-row select list: group key, association, state, and the row's figures."""
    ts, te, su = (
        _S.format("t1.time_start"),
        _S.format("t1.time_end"),
        _S.format("t1.time_suspended"),
    )
    gid = str(schema.gpu_tres_id)
    params: list[Any] = [gid, gid]
    if definition == "sreport":
        elapsed = _SREPORT_ELAPSED.format(te=te, ts=ts)
        params += [now, f.end, now, f.start]
    else:
        st = _SACCT_START.format(te=te, ts=ts)
        elapsed = _SACCT_ELAPSED.format(te=te, st=st, su=su)
        params += [now, now]
    sql = " ".join(
        (
            f"{GROUP_COLUMNS[by]} AS k, t1.id_assoc AS a, t1.state AS state,",
            "(t1.time_start > 0 AND t1.time_end = 0) AS running,",
            f"({_GPUS}) * ({elapsed}) AS gpu_s,",
            f"IF(t1.time_start > 0, {ts} - {_S.format('t1.time_submit')}, 0) AS wait_s,",
            "(t1.time_start > 0) AS started",
        )
    )
    return sql, params


_NEWEST = "ROW_NUMBER() OVER (PARTITION BY t1.id_job ORDER BY t1.time_submit DESC)"
# group_concat_max_len as high as it goes on 32-bit builds too; a list cut anyway (by
# max_allowed_packet) is caught by the length check in report.py.
_CONCAT_LEN = 4294967295


def _grouped(schema: Schema, rows: str, keep: str, with_ids: bool = False) -> str:
    """Sums per group and association over ``rows``, with the association's user name
    looked up for each of those few result rows (the caller adds the associations of a
    group up). ``with_ids`` adds the list of the job ids whose newest row (``rn = 1``)
    is in the group, and the length that list must have (digits plus one comma per id),
    so that a list cut short shows. The lists are made at the top level only: a derived
    table holding them would be a BLOB temporary table on disk."""
    ids = ""
    if with_ids:
        ids = ", SUM(IF(r.rn = 1, LENGTH(r.j) + 1, 0)), GROUP_CONCAT(IF(r.rn = 1, r.j, NULL))"
    return " ".join(
        (
            # CAST: user is TINYTEXT, which would put the grouping table on disk.
            "SELECT r.k, CAST((SELECT t2.user FROM",
            schema.table("assoc_table"),
            "AS t2 WHERE t2.id_assoc = r.a) AS CHAR(255)), COUNT(*), SUM(r.running),",
            "SUM(r.gpu_s),",
            f"SUM(r.wait_s), SUM(r.started){ids} FROM ({rows}) AS r{keep} GROUP BY r.k, r.a",
        )
    )


def _prefix(server: Server, with_ids: bool) -> str:
    if not server.mariadb:
        return ""
    extra = f", group_concat_max_len={_CONCAT_LEN}" if with_ids else ""
    return f"SET STATEMENT optimizer_switch='mrr=on,mrr_cost_based=off'{extra} FOR "


def group_query(
    schema: Schema,
    f: Filters,
    by: str,
    definition: str,
    now: int,
    server: Server,
    part: Slice | None = None,
    with_ids: bool = False,
) -> tuple[str, list[Any]]:
    """One row per group and association: key, user name, jobs, running, GPU-seconds,
    wait sum, started (and, ``with_ids``, the id list's length and the list: see
    ``_grouped``).

    Two levels, so that the costly parts touch few rows: (1) the selected rows with
    each row's figures and, for sacct, its rank among the selected rows of its job id
    (newest first; one sort instead of a probe per row), (2) sums per group and
    association, with the association's user name looked up for those few rows.

    ``part`` restricts the rows to one slice of the selection. The newest-row rank is
    then taken within the slice: a job id with rows in two slices is counted once in
    each, which the caller corrects with ``overcount_query`` (``with_ids`` tells it which
    ids those are). Without window functions the probe looks at the whole selection, so
    slices need no correction there.
    """
    figures, params = _row_figures(schema, by, definition, now, f)
    where, wparams = where_clause(f, part)
    params += wparams
    rank = ""
    keep = ""
    if definition == "sacct":
        if server.window_functions:
            rank = f", {_NEWEST} AS rn"
            # sacct keeps the newest selected row of each job id (and resize rows).
            keep = f" WHERE r.rn = 1 OR r.state = {JOB_RESIZING}"
        else:
            # sacct's newest-row rule as a per-row probe (servers without window functions)
            inner, iparams = where_clause(f)
            inner = inner.replace("t1.", "t3.").replace("WHERE ", "AND ", 1)
            where += " ".join(
                (
                    f" AND (t1.state = {JOB_RESIZING} OR NOT EXISTS (SELECT 1 FROM",
                    schema.table("job_table"),
                    "AS t3 WHERE t3.id_job = t1.id_job AND t3.time_submit > t1.time_submit",
                    inner,
                    "))",
                )
            )
            params += iparams
    if with_ids and not rank:  # a caller's bug, never a user's value: a builtin, not the tree
        raise ValueError("job id lists need the window-function de-duplication")
    # The index sacct itself uses: per user, else by end time (MariaDB otherwise tends
    # to walk a whole other index for a month of all users).
    index = "sacct_def2" if f.uids else "rollup2"
    ids = ", t1.id_job AS j" if with_ids else ""
    rows = " ".join(
        (
            f"SELECT {figures}{ids}{rank} FROM",
            schema.table("job_table"),
            f"AS t1 FORCE INDEX ({index})",
            where,
        )
    )
    return _prefix(server, with_ids) + _grouped(schema, rows, keep, with_ids), params


def overcount_query(
    schema: Schema,
    f: Filters,
    by: str,
    now: int,
    server: Server,
    points: list[int],
    job_ids: list[int],
) -> tuple[str, list[Any]]:
    """Per group, what slices cut at ``points`` counted too much for ``job_ids``.

    For the given job ids (those with selected rows in more than one slice), every
    selected row is ranked twice: within its job id, and within its job id and slice.
    Each slice counted its own newest row; the rows that are a slice's newest but not
    the job's newest (and not resize rows, which count anyway) are the surplus. The
    rows are found through the ``id_job (id_job, time_submit)`` key.
    """
    figures, params = _row_figures(schema, by, "sacct", now, f)
    # The slice a row falls in: how many split points its end lies at or after (an
    # unfinished row, time_end = 0, is in the last).
    part = " + ".join(["(t1.time_end = 0 OR t1.time_end >= %s)"] * len(points))
    params += points
    where, wparams = where_clause(f)
    params += wparams
    rows = " ".join(
        (
            f"SELECT {figures}, {_NEWEST} AS rn,",
            f"ROW_NUMBER() OVER (PARTITION BY t1.id_job, {part} ORDER BY t1.time_submit DESC)",
            "AS prn FROM",
            schema.table("job_table"),
            "AS t1 FORCE INDEX (id_job)",
            where,
            _in("t1.id_job", tuple(job_ids), params),
        )
    )
    keep = f" WHERE r.prn = 1 AND r.rn > 1 AND r.state != {JOB_RESIZING}"
    return _prefix(server, False) + _grouped(schema, rows, keep), params
