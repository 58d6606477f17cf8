"""The report's SQL: fixed statements, values always passed as parameters.

Only the per-cluster table names (validated against cluster_table) and the number of
``%s`` placeholders in an ``IN (...)`` list vary; no user-supplied text is ever spliced
into a statement. The WHERE clause is sacct's time filter, which lets MariaDB use the
job table's ``sacct_def2 (id_user, time_end, time_eligible)`` index for user reports and
``rollup2 (time_end, time_eligible)`` for all-user reports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from acbslurm.accounting.schema import Schema
from acbslurm.accounting.states import JOB_REVOKED

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
)


@dataclass(frozen=True)
class Filters:
    start: int
    end: int
    uids: tuple[int, ...] = ()
    accounts: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()


def _in(column: str, values: tuple[Any, ...], params: list[Any]) -> str:
    params.extend(values)
    return f" AND {column} IN ({', '.join(['%s'] * len(values))})"


def where_clause(f: Filters) -> tuple[str, list[Any]]:
    """sacct's selection: eligible before the window ends, not ended before it starts."""
    params: list[Any] = [JOB_REVOKED, f.end, f.start]
    sql = (
        "WHERE t1.deleted = 0 AND t1.state != %s"
        " AND t1.time_eligible != 0 AND t1.time_eligible < %s"
        " AND (t1.time_end >= %s OR t1.time_end = 0)"
    )
    if f.uids:
        sql += _in("t1.id_user", f.uids, params)
    if f.accounts:
        sql += _in("t1.account", f.accounts, params)
    if f.partitions:
        sql += _in("t1.`partition`", f.partitions, params)
    return sql, params


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
