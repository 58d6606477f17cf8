"""Connection config layering, password hiding, SQL building, schema checks, bad input."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from acbslurm.accounting.dbconfig import DbConfig, resolve_db_config
from acbslurm.accounting.gpuseconds import JobUsage
from acbslurm.accounting.grouping import Aggregator
from acbslurm.accounting.output import JSON_FORMAT, write_csv, write_json, write_table
from acbslurm.accounting.queries import Filters, job_query, step_util_query
from acbslurm.accounting.schema import Schema, check_version, pick_cluster
from acbslurm.cli.main import cli
from acbslurm.errors import AccountingError, ConfigError
from acbslurm.units import parse_instant

SECRET = "s3cr3t-Pa55"


def test_flags_beat_env_beat_option_file(tmp_path: Path) -> None:
    opt = tmp_path / "db.cnf"
    opt.write_text("[client]\nuser=fromfile\n")
    env = {
        "ACBSLURM_DB_HOST": "envhost",
        "ACBSLURM_DB_USER": "envuser",
        "ACBSLURM_DB_PORT": "3307",
        "ACBSLURM_DB_CONFIG": str(opt),
        "ACBSLURM_DB_PASSWORD": SECRET,
    }
    cfg = resolve_db_config(user="flaguser", environ=env)
    assert cfg.user == "flaguser" and cfg.host == "envhost" and cfg.port == 3307
    kw = cfg.connect_kwargs()
    assert kw["read_default_file"] == str(opt)
    assert kw["user"] == "flaguser" and kw["password"] == SECRET
    # Nothing given on the command line or env: the option file alone decides.
    only_file = resolve_db_config(settings_db_config=str(opt), environ={})
    kw2 = only_file.connect_kwargs()
    assert "user" not in kw2 and "password" not in kw2 and "host" not in kw2


def test_password_never_in_repr_or_description() -> None:
    cfg = resolve_db_config(host="h", user="u", environ={"ACBSLURM_DB_PASSWORD": SECRET})
    assert cfg.password == SECRET
    assert SECRET not in repr(cfg)
    assert SECRET not in cfg.describe()
    assert SECRET not in str(cfg)


def test_missing_option_file_and_bad_port() -> None:
    with pytest.raises(ConfigError, match=r"nope\.cnf"):
        resolve_db_config(option_file="/nonexistent/nope.cnf", environ={})
    with pytest.raises(ConfigError, match="'abc'"):
        resolve_db_config(environ={"ACBSLURM_DB_PORT": "abc"})


def test_describe_names_where() -> None:
    assert DbConfig(socket="/run/x.sock").describe() == "socket /run/x.sock"
    assert DbConfig(host="db", port=3310, user="r").describe() == "db:3310 as 'r'"


SCHEMA = Schema(
    version=12, cluster="acbsandbox", gpu_tres_id=1001, gpuutil_tres_id=None, gpumem_tres_id=None
)


@given(
    accounts=st.lists(st.text(min_size=1, max_size=20), max_size=4),
    parts=st.lists(st.text(min_size=1, max_size=20), max_size=3),
)
def test_user_values_only_travel_as_parameters(accounts: list[str], parts: list[str]) -> None:
    f = Filters(
        start=10, end=20, uids=(1001, 1002), accounts=tuple(accounts), partitions=tuple(parts)
    )
    for sql, params in (job_query(SCHEMA, f), step_util_query(SCHEMA, f)):
        assert sql.count("%s") == len(params)
        n = len(accounts) + len(parts)
        assert params[len(params) - n :] == accounts + parts
        # The statement text depends only on how many values there are.
        same_shape = Filters(
            start=1,
            end=2,
            uids=(7, 8),
            accounts=("x",) * len(accounts),
            partitions=("y",) * len(parts),
        )
        other_sql = (job_query if "LEFT JOIN" in sql else step_util_query)(SCHEMA, same_shape)[0]
        assert sql == other_sql


def test_query_uses_sacct_time_filter_and_order() -> None:
    sql, params = job_query(SCHEMA, Filters(start=100, end=200, uids=(5,)))
    assert "`acbsandbox_job_table` AS t1" in sql
    assert "t1.time_eligible < %s AND (t1.time_end >= %s OR t1.time_end = 0)" in sql
    assert sql.endswith("ORDER BY t1.id_job, t1.time_submit DESC")
    assert params[1:] == [200, 100, 5]


def test_cluster_choice_and_versions() -> None:
    assert pick_cluster("", ["only"]) == "only"
    assert pick_cluster("b", ["a", "b"]) == "b"
    with pytest.raises(AccountingError, match="'c' is not in this accounting database"):
        pick_cluster("c", ["a", "b"])
    with pytest.raises(AccountingError, match="--cluster"):
        pick_cluster("", ["a", "b"])
    with pytest.raises(AccountingError, match="not a valid"):
        pick_cluster("x; DROP TABLE y", ["a"])
    check_version(12)
    check_version(16)
    with pytest.raises(AccountingError, match=r"schema version 99 \(a newer Slurm than"):
        check_version(99)
    assert not SCHEMA.gpu_util_recorded
    newer = Schema(
        version=13, cluster="c", gpu_tres_id=1001, gpuutil_tres_id=1002, gpumem_tres_id=1003
    )
    assert newer.gpu_util_recorded


def test_parse_time_forms() -> None:
    now = 1_800_000_000
    assert parse_instant("now", now) == now
    assert parse_instant("now-2d", now) == now - 2 * 86400
    assert parse_instant("@12345", now) == 12345
    assert parse_instant("2026-01-02", now) == parse_instant("2026-01-02T00:00:00", now)
    with pytest.raises(ValueError, match="'yesterdayish'"):
        parse_instant("yesterdayish", now)


def _job(n: int) -> JobUsage:
    return JobUsage(
        job_id=str(n),
        job_id_raw=n,
        job_db_inx=n,
        uid=1,
        user=f"u{n % 2}",
        account="a",
        partition="p1",
        state="COMPLETED",
        running=False,
        gpus=1,
        submit=100,
        start=110,
        end=210,
        wait=10,
        elapsed=100,
        gpu_seconds=100,
        span_start=110,
        span_end=210,
    )


META = {
    "format": JSON_FORMAT,
    "cluster": "c",
    "schema_version": 12,
    "slurm_release": "22.05",
    "definition_text": "sacct",
    "window": {"start": "a", "end": "b"},
    "gpu_utilization": {"recorded": False, "note": "not recorded"},
}


def test_json_by_job_and_by_user_parse() -> None:
    out = io.StringIO()
    write_json(out, META, (_job(n) for n in range(3)), Aggregator("job", "sacct"))
    doc = json.loads(out.getvalue())
    assert [j["job_id"] for j in doc["jobs"]] == ["0", "1", "2"]
    assert doc["groups"] is None and doc["totals"]["gpu_seconds"] == 300
    out = io.StringIO()
    write_json(out, META, (_job(n) for n in range(3)), Aggregator("user", "sacct"))
    doc = json.loads(out.getvalue())
    assert doc["jobs"] is None
    assert {g["key"]: g["gpu_seconds"] for g in doc["groups"]} == {"u0": 200, "u1": 100}


def test_csv_and_table_render() -> None:
    out = io.StringIO()
    write_csv(out, (_job(n) for n in range(2)), Aggregator("job", "sacct"))
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("job_id,job_id_raw,user")
    assert len(lines) == 3
    out = io.StringIO()
    write_table(out, META, (_job(n) for n in range(2)), Aggregator("user", "sacct"))
    assert "# total: 2 jobs" in out.getvalue()
    assert "not recorded" in out.getvalue()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--start", "yesterdayish"], "'yesterdayish'"),
        (["--state", "BOGUS"], "'BOGUS'"),
        (["--user", "no-such-user-xyz"], "'no-such-user-xyz'"),
        (["--start", "2026-02-01", "--end", "2026-01-01"], "'2026-02-01'"),
        (["--by", "week"], "'week'"),
    ],
)
def test_bad_input_exits_2_with_value_quoted(args: list[str], needle: str) -> None:
    res = CliRunner().invoke(cli, ["report", *args])
    assert res.exit_code == 2, res.output
    assert needle in res.output
    assert "Traceback" not in res.output
