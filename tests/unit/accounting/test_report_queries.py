"""The grouped report's SQL: server feature detection and statement shape."""

from __future__ import annotations

import pytest

from acbslurm.accounting.queries import (
    Filters,
    Server,
    group_query,
    overcount_query,
    slices,
    split_points,
)
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


def _rows_in(sl: tuple[int, int | None], te: int) -> bool:
    """What a slice's WHERE admits for one time_end (mirrors where_clause)."""
    lo, hi = sl
    return (te >= lo or te == 0) if hi is None else lo <= te < hi


@pytest.mark.parametrize("parts", [2, 3, 5])
def test_slices_cover_the_selection_once(parts: int) -> None:
    f = Filters(start=1000, end=5000)
    points = split_points(f, now=4000, parts=parts)
    assert len(points) == parts - 1 and points == sorted(set(points))
    assert all(1000 < p < 4000 for p in points)
    cut = slices(f, points)
    assert len(cut) == parts
    for te in [0, 1000, 1001, *points, *(p - 1 for p in points), 3999, 4000, 9999]:
        whole = te >= 1000 or te == 0
        assert sum(_rows_in(sl, te) for sl in cut) == int(whole), te


def test_split_points_need_room_and_slices_rising_points() -> None:
    assert split_points(Filters(start=100, end=101), now=500, parts=2) == []
    assert split_points(Filters(start=100, end=500), now=500, parts=1) == []
    # A window starting at 0 still keeps unfinished rows (time_end = 0) in one slice.
    f = Filters(start=0, end=50)
    cut = slices(f, split_points(f, now=50, parts=2))
    assert [sum(_rows_in(sl, te) for sl in cut) for te in (0, 1, 25, 49, 70)] == [1] * 5
    with pytest.raises(ValueError, match="must rise"):
        slices(Filters(start=100, end=500), [300, 200])


def test_sliced_group_query_carries_ids_and_binds_everything() -> None:
    f = Filters(start=100, end=200, uids=(20000,))
    for part in slices(f, [150]):
        sql, params = group_query(SCHEMA, f, "user", "sacct", 300, MARIADB, part, with_ids=True)
        assert sql.count("%s") == len(params)
        assert "GROUP_CONCAT(IF(r.rn = 1, r.j, NULL))" in sql
        assert "group_concat_max_len=" in sql.split(" FOR ", 1)[0]
        assert 150 in params
    with pytest.raises(ValueError, match="window-function"):
        group_query(SCHEMA, f, "user", "sacct", 300, OLD_MYSQL, (100, 150), with_ids=True)


def test_overcount_query_ranks_per_job_and_slice() -> None:
    f = Filters(start=100, end=200, accounts=("acct",))
    sql, params = overcount_query(SCHEMA, f, "account", 300, MARIADB, [130, 160], [7, 9, 11])
    assert sql.count("%s") == len(params)
    assert "FORCE INDEX (id_job)" in sql and "t1.id_job IN (%s, %s, %s)" in sql
    assert "PARTITION BY t1.id_job, (t1.time_end = 0 OR t1.time_end >= %s) + (" in sql
    assert "r.prn = 1 AND r.rn > 1" in sql
    # Values are parameters, in text order: points before the WHERE's, ids last.
    assert params[-3:] == [7, 9, 11] and params.index(130) < params.index("acct")
