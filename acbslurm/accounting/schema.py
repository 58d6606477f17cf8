"""What the live database looks like: schema version, cluster tables, TRES ids.

Everything a report relies on is checked here, once, with a fixed handful of queries,
so that a wrong cluster name or an unknown schema gives one clear message instead of an
SQL error halfway through a report.
"""

from __future__ import annotations

import re
from typing import Any

from acbslurm.errors import AccountingError
from acbslurm.slurm.versions import GPU_UTIL_MIN_SCHEMA, SCHEMA_RELEASES
from acbslurm.values import frozen

# convert_version_table.version -> the Slurm releases that write it (14 is 23.11's first
# schema, not 23.02's: the labels live with every other release difference).
KNOWN_VERSIONS: dict[int, str] = SCHEMA_RELEASES
# From this version on, steps may carry gres/gpuutil and gres/gpumem usage.
GPU_UTIL_MIN_VERSION = GPU_UTIL_MIN_SCHEMA

# Job-table columns a report reads (present in every known version).
JOB_COLUMNS = (
    "job_db_inx",
    "id_job",
    "id_array_job",
    "id_array_task",
    "array_task_str",
    "id_user",
    "id_assoc",
    "account",
    "partition",
    "state",
    "time_submit",
    "time_eligible",
    "time_start",
    "time_end",
    "time_suspended",
    "tres_alloc",
    "deleted",
)
STEP_COLUMNS = ("job_db_inx", "tres_usage_in_ave", "tres_usage_in_max", "deleted")

_CLUSTER_RE = re.compile(r"^[A-Za-z0-9_]{1,64}$")


@frozen
class Schema:
    version: int
    cluster: str
    gpu_tres_id: int | None
    gpuutil_tres_id: int | None
    gpumem_tres_id: int | None

    @property
    def slurm_release(self) -> str:
        return KNOWN_VERSIONS.get(self.version, "unknown")

    @property
    def gpu_util_recorded(self) -> bool:
        return self.version >= GPU_UTIL_MIN_VERSION and self.gpuutil_tres_id is not None

    def table(self, kind: str) -> str:
        """A quoted per-cluster table name (the cluster was validated on detection)."""
        return f"`{self.cluster}_{kind}`"


def check_version(version: int) -> None:
    if version not in KNOWN_VERSIONS:
        known = ", ".join(f"{v} (Slurm {r})" for v, r in sorted(KNOWN_VERSIONS.items()))
        newer = " (a newer Slurm than this acbslurm knows)" if version > max(KNOWN_VERSIONS) else ""
        raise AccountingError(
            f"slurmdbd schema version {version}{newer} is not one this report knows "
            f"({known}); its columns may differ, so no numbers are given"
        )


def fetch_rows(conn: Any, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """All rows of one query on slurmdbd's tables; a clear AccountingError otherwise."""
    import MySQLdb  # the MySQL client library: not loaded by a report through the service

    cur = conn.cursor()
    try:
        cur.execute(sql, params)
        return list(cur.fetchall())
    except MySQLdb.Error as exc:
        code = exc.args[0] if exc.args else 0
        if code == 1146:  # table does not exist
            raise AccountingError(
                "this database has no slurmdbd tables (convert_version_table/cluster_table/"
                f"tres_table missing): is it slurmdbd's StorageLoc? ({exc.args[-1]})"
            ) from None
        if code in (1142, 1143):  # SELECT command denied
            raise AccountingError(
                f"the database user may not read slurmdbd's tables: {exc.args[-1]}"
            ) from None
        raise AccountingError(f"reading the accounting schema failed: {exc.args[-1]}") from None
    finally:
        cur.close()


def is_cluster_name(name: str) -> bool:
    """A name slurmdbd could use in its table names (letters, digits, _)."""
    return bool(_CLUSTER_RE.match(name))


def pick_cluster(requested: str, clusters: list[str]) -> str:
    """The cluster to report on: the one asked for, or the only one there is."""
    if requested:
        if not _CLUSTER_RE.match(requested):
            raise AccountingError(f"cluster name {requested!r} is not a valid Slurm cluster name")
        if requested not in clusters:
            have = ", ".join(sorted(clusters)) or "none"
            raise AccountingError(
                f"cluster {requested!r} is not in this accounting database (clusters: {have})"
            )
        return requested
    if len(clusters) == 1:
        return clusters[0]
    have = ", ".join(sorted(clusters)) or "none"
    raise AccountingError(
        f"name the cluster with --cluster or ACBSLURM_CLUSTER (clusters here: {have})"
    )


def detect(conn: Any, cluster: str) -> Schema:
    """Check the schema and resolve the cluster and TRES ids (four small queries)."""
    rows = fetch_rows(conn, "SELECT version FROM convert_version_table")
    if not rows:
        raise AccountingError("convert_version_table is empty: slurmdbd never set this DB up")
    version = int(max(r[0] for r in rows))
    check_version(version)
    names = fetch_rows(conn, "SELECT name FROM cluster_table WHERE deleted = 0")
    clusters = [str(r[0]) for r in names]
    name = pick_cluster(cluster, clusters)
    if not _CLUSTER_RE.match(name):
        raise AccountingError(f"cluster name {name!r} in cluster_table cannot name a table")
    tres = fetch_rows(
        conn,
        "SELECT id, name FROM tres_table WHERE type = 'gres' AND deleted = 0 "
        "AND name IN ('gpu', 'gpuutil', 'gpumem')",
    )
    ids = {str(n): int(i) for i, n in tres}
    # The columns of the cluster's job and step tables, by table.
    cols = fetch_rows(
        conn,
        "SELECT table_name, column_name FROM information_schema.columns "
        "WHERE table_schema = DATABASE() AND table_name IN (%s, %s)",
        (f"{name}_job_table", f"{name}_step_table"),
    )
    have: dict[str, set[str]] = {}
    for table, column in cols:
        have.setdefault(str(table), set()).add(str(column))
    _check_job_columns(name, have.get(f"{name}_job_table", set()), version)
    step_ok = all(c in have.get(f"{name}_step_table", set()) for c in STEP_COLUMNS)
    return Schema(
        version=version,
        cluster=name,
        gpu_tres_id=ids.get("gpu"),
        gpuutil_tres_id=ids.get("gpuutil") if step_ok else None,
        gpumem_tres_id=ids.get("gpumem") if step_ok else None,
    )


def _check_job_columns(name: str, job_have: set[str], version: int) -> None:
    """The job table is there with every column the report reads."""
    if not job_have:
        raise AccountingError(f"table {name}_job_table is missing or not readable")
    missing = [c for c in JOB_COLUMNS if c not in job_have]
    if missing:
        raise AccountingError(
            f"{name}_job_table lacks columns {', '.join(missing)} (schema version {version})"
        )
