"""`acbslurm report` end to end on a stand-in database: metadata, format, connections."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import Any

import pytest

from acbslurm.accounting import make_report as run_mod
from acbslurm.accounting.gpuseconds import JobUsage
from acbslurm.accounting.grouping import Aggregator
from acbslurm.accounting.make_report import metadata, report_request, run_report
from acbslurm.accounting.options import OptionError, ReportOptions, Selection
from acbslurm.accounting.report import ReportRequest
from acbslurm.accounting.schema import Schema
from acbslurm.config import Settings
from acbslurm.errors import AccountingError
from acbslurm.units import iso

NOW = 1_760_000_000
OLD = Schema(12, "c1", 1001, None, None)  # Slurm 22.05: no GPU utilization
NEW = Schema(15, "c1", 1001, 1002, 1003)


def _job(n: int) -> JobUsage:
    return JobUsage(
        job_id=str(n),
        job_id_raw=n,
        job_db_inx=n,
        uid=1000 + n % 2,
        user=f"u{n % 2}",
        account="a",
        partition="p1",
        state="COMPLETED",
        running=False,
        gpus=1,
        submit=NOW - 300,
        start=NOW - 200,
        end=NOW - 100,
        wait=100,
        elapsed=100,
        gpu_seconds=100,
        span_start=NOW - 200,
        span_end=NOW - 100,
    )


def test_metadata_names_window_filters_and_schema() -> None:
    opts = ReportOptions(users=("alice",), accounts=("a",), by="user", definition="sreport")
    sel = Selection(NOW - 60, NOW, (1001,), frozenset({"RUNNING", "FAILED"}))
    meta = metadata(opts, sel, OLD, NOW)
    assert meta["window"] == {
        "start": iso(NOW - 60),
        "end": iso(NOW),
        "start_unix": NOW - 60,
        "end_unix": NOW,
    }
    assert meta["filters"] == {
        "users": ["alice"],
        "uids": [1001],
        "accounts": ["a"],
        "partitions": [],
        "states": ["FAILED", "RUNNING"],
    }
    assert (meta["by"], meta["definition"], meta["now_unix"]) == ("user", "sreport", NOW)
    assert (meta["cluster"], meta["schema_version"], meta["gpu_tres_id"]) == ("c1", 12, 1001)
    assert meta["gpu_utilization"]["recorded"] is False
    assert "Slurm 22.05, schema 12" in meta["gpu_utilization"]["note"]
    assert metadata(opts, sel, NEW, NOW)["gpu_utilization"]["recorded"] is True


def test_request_carries_the_selection() -> None:
    opts = ReportOptions(accounts=("a",), partitions=("p",), by="day", definition="sreport")
    sel = Selection(1, 2, (7,), frozenset({"FAILED"}))
    req = report_request(opts, sel, NOW)
    assert (req.filters.start, req.filters.end, req.filters.uids) == (1, 2, (7,))
    assert (req.filters.accounts, req.filters.partitions) == (("a",), ("p",))
    assert (req.now, req.by, req.definition, req.states) == (NOW, "day", "sreport", sel.states)


class _Db:
    """Stands in for MariaDB: records what was asked, counts open connections."""

    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        self.open = 0
        self.calls: list[str] = []
        self.cfg: dict[str, Any] = {}

    def db_config(self, **kw: Any) -> dict[str, Any]:
        self.cfg = kw
        return kw

    def connect(self, cfg: Any) -> _Db:
        self.open += 1
        return self

    def close(self) -> None:
        self.open -= 1

    def detect(self, conn: Any, cluster: str) -> Schema:
        self.calls.append(f"detect {cluster}")
        return self.schema

    def iter_jobs(
        self, conn: Any, schema: Schema, req: ReportRequest, left_out: Any = None
    ) -> Iterator[JobUsage]:
        self.calls.append("iter_jobs")
        return (_job(n) for n in range(3))

    def fill_groups(
        self, conn: Any, schema: Schema, req: ReportRequest, agg: Aggregator, more: Any
    ) -> None:
        self.calls.append("fill_groups")
        for n in range(3):
            agg.add(_job(n))


@pytest.fixture
def db(monkeypatch: pytest.MonkeyPatch) -> _Db:
    fake = _Db(OLD)
    monkeypatch.setattr(run_mod, "connect", fake.connect)
    monkeypatch.setattr(run_mod, "detect", fake.detect)
    monkeypatch.setattr(run_mod, "iter_jobs", fake.iter_jobs)
    monkeypatch.setattr(run_mod, "fill_groups", fake.fill_groups)
    monkeypatch.setattr(run_mod, "load_settings", lambda: Settings(cluster="fromsettings"))
    monkeypatch.setattr(run_mod, "resolve_db_config", fake.db_config)
    return fake


def test_json_per_job(db: _Db) -> None:
    out = io.StringIO()
    run_report(ReportOptions(fmt="json", start="@100", end="@200"), out, now=NOW)
    doc = json.loads(out.getvalue())
    assert [j["job_id"] for j in doc["jobs"]] == ["0", "1", "2"]
    assert doc["report"]["window"]["start_unix"] == 100
    assert db.calls == ["detect fromsettings", "iter_jobs"] and db.open == 0


def test_grouped_without_state_filter_is_summed_by_the_server(db: _Db) -> None:
    out = io.StringIO()
    opts = ReportOptions(fmt="csv", by="user", cluster="mine", db_host="h", db_port=3307)
    run_report(opts, out, now=NOW)
    assert (db.cfg["host"], db.cfg["port"], db.cfg["settings_db_config"]) == ("h", 3307, "")
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert {r["key"]: r["jobs"] for r in rows} == {"u0": "2", "u1": "1"}
    assert db.calls == ["detect mine", "fill_groups"] and db.open == 0


def test_table_with_a_state_filter_reads_the_jobs(db: _Db) -> None:
    out = io.StringIO()
    run_report(ReportOptions(by="user", states=("CD",)), out, now=NOW)
    assert db.calls[-1] == "iter_jobs"
    assert out.getvalue().startswith("# cluster c1, slurmdbd schema 12")


def test_bad_option_touches_no_setting_and_no_database(
    db: _Db, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom() -> Settings:
        raise AssertionError("settings read before the options were checked")

    monkeypatch.setattr(run_mod, "load_settings", boom)
    with pytest.raises(OptionError):
        run_report(ReportOptions(start="later"), io.StringIO(), now=NOW)
    assert db.calls == []


def test_no_gpu_tres_is_an_error_and_the_connection_is_closed(db: _Db) -> None:
    db.schema = Schema(12, "c1", None, None, None)
    out = io.StringIO()
    with pytest.raises(AccountingError, match="AccountingStorageTRES=gres/gpu"):
        run_report(ReportOptions(), out, now=NOW)
    assert db.open == 0 and out.getvalue() == ""
