"""Adding up sliced server sums: id-list checks, straddling ids, surplus subtraction."""

from __future__ import annotations

from typing import Any

import pytest

from acbslurm.accounting import report
from acbslurm.accounting.report import _add_rows, _id_lists, _straddling
from acbslurm.errors import AccountingError


def row(key: Any, user: str | None, jobs: int, ids: list[int] | None = None) -> tuple[Any, ...]:
    base = (key, user, jobs, 0, 10 * jobs, 1, jobs)
    if ids is None:
        return base
    text = ",".join(map(str, ids))
    return (*base, len(text) + 1 if ids else 0, text or None)


def test_id_lists_detect_a_cut_list() -> None:
    assert _id_lists([row(1, "a", 2, [5, 7]), row(2, None, 1, [9])]) == {"5", "7", "9"}
    assert _id_lists([row(1, "a", 0, [])]) == set()
    assert _id_lists([(1, "a", 2, 0, 20, 1, 2, 9, b"123,4567")]) == {"123", "4567"}
    cut = (1, "a", 3, 0, 30, 1, 3, len("5,7,123") + 1, "5,7,12")  # "123" cut to "12"
    assert _id_lists([cut]) is None
    empty = (1, "a", 3, 0, 30, 1, 3, 4, None)
    assert _id_lists([empty]) is None


def test_straddling_ids_are_those_in_two_slices() -> None:
    assert _straddling([{"1", "2", "3"}, {"3", "4"}, {"4", "5", "1"}]) == [1, 3, 4]
    assert _straddling([{"1"}, {"2"}]) == []


def test_add_rows_merges_keys_and_subtracts_surplus() -> None:
    sums: dict[Any, list[Any]] = {}
    _add_rows(sums, [row(1000, None, 2), row(1001, "bob", 1)])
    _add_rows(sums, [row(1000, "alice", 3, [1, 2, 3])])
    assert sums[1000] == ["alice", 5, 0, 50, 2, 5]
    _add_rows(sums, [row(1001, None, 1)], sign=-1)
    assert sums[1001] == ["bob", 0, 0, 0, 0, 0]


def test_a_slice_without_its_own_connection_runs_on_the_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran: list[tuple[str, Any]] = []

    def fake_fetch(conn: Any, sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
        ran.append((sql, conn))
        return [(sql,)]

    def refuse() -> Any:
        raise AccountingError("too many connections")

    monkeypatch.setattr(report, "_fetch", fake_fetch)
    got = report._run_parallel("main", refuse, [("q0", []), ("q1", []), ("q2", [])])
    assert got == [[("q0",)], [("q1",)], [("q2",)]]
    assert sorted(ran) == [("q0", "main"), ("q1", "main"), ("q2", "main")]
