"""The grouped report's SQL: server feature detection and statement shape."""

from __future__ import annotations

import pytest

from acbslurm.accounting.queries import Filters, Server, group_query
from acbslurm.accounting.schema import Schema

SCHEMA = Schema(
    version=12, cluster="c1", gpu_tres_id=1001, gpuutil_tres_id=None, gpumem_tres_id=None
)
MARIADB = Server(mariadb=True, version=(10, 11))
OLD_MYSQL = Server(mariadb=False, version=(5, 7))


@pytest.mark.parametrize(
    ("info", "mariadb", "version", "window"),
    [
        ("10.11.6-MariaDB-0+deb12u1", True, (10, 11), True),
        ("5.5.5-10.1.48-MariaDB", True, (10, 1), False),
        ("5.5.5-10.6.16-MariaDB-log", True, (10, 6), True),
        ("10.1.48-MariaDB", True, (10, 1), False),
        ("8.0.36", False, (8, 0), True),
        ("5.7.44-log", False, (5, 7), False),
        ("garbage", False, (0, 0), False),
    ],
)
def test_server_parse(info: str, mariadb: bool, version: tuple[int, int], window: bool) -> None:
    s = Server.parse(info)
    assert (s.mariadb, s.version, s.window_functions) == (mariadb, version, window)


@pytest.mark.parametrize("server", [MARIADB, OLD_MYSQL])
@pytest.mark.parametrize("definition", ["sacct", "sreport"])
@pytest.mark.parametrize("by", ["user", "account", "partition"])
@pytest.mark.parametrize("uids", [(), (20000, 20001)])
def test_group_query_binds_every_placeholder(
    server: Server, definition: str, by: str, uids: tuple[int, ...]
) -> None:
    f = Filters(start=100, end=200, uids=uids, accounts=("a'; DROP TABLE x; --",))
    sql, params = group_query(SCHEMA, f, by, definition, 300, server)
    assert sql.count("%s") == len(params)
    # Values never reach the text; only validated table names do.
    assert "DROP" not in sql and "20000" not in sql
    assert "`c1_job_table`" in sql and "`c1_assoc_table`" in sql
    assert f"FORCE INDEX ({'sacct_def2' if uids else 'rollup2'})" in sql
    assert sql.startswith("SET STATEMENT") == server.mariadb


def test_group_query_dedup_by_server() -> None:
    f = Filters(start=100, end=200)
    new, _ = group_query(SCHEMA, f, "user", "sacct", 300, MARIADB)
    old, _ = group_query(SCHEMA, f, "user", "sacct", 300, OLD_MYSQL)
    assert "ROW_NUMBER() OVER (PARTITION BY t1.id_job" in new and "NOT EXISTS" not in new
    assert "NOT EXISTS" in old and "ROW_NUMBER" not in old
    # sreport counts every row: no de-duplication at all.
    for server in (MARIADB, OLD_MYSQL):
        sql, _ = group_query(SCHEMA, f, "user", "sreport", 300, server)
        assert "ROW_NUMBER" not in sql and "NOT EXISTS" not in sql
