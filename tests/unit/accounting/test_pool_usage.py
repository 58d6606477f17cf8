"""A pool job's usage in the AdminComment (the epilog's word) and the report's views of
it: per job (allocated, leased, idle, each name's share) and `--by key`."""

from __future__ import annotations

import io
import json

import pytest

from acbslurm.accounting.bykey import write_by_key
from acbslurm.accounting.gpuseconds import JobUsage, pool_usage
from acbslurm.accounting.output import pool_line, pool_record
from acbslurm.slurm.job_history import with_node_words
from acbslurm.slurm.usage_history import MAX_ENTRIES, MAX_WORD, parse_usage, usage_token
from acbslurm.usagebook import Totals

META = {"cluster": "c", "window": {"start": "s", "end": "e"}}


def _totals() -> Totals:
    t = Totals()
    t.add_request("alice", "model-a", 3, 4)
    t.add_request("ci-bot", "org/m:1", 5, 6)
    t.add_lease("model-a", 6.0, {"alice": 6.0})
    t.add_lease("org/m:1", 4.0, {"ci-bot": 3.0, "-": 1.0})
    return t


def _job(comment: str, gpu_seconds: int = 100, job_id: str = "7") -> JobUsage:
    return JobUsage(
        job_id=job_id, job_id_raw=7, job_db_inx=1, uid=1001, user="user1", account="a",
        partition="p1", state="COMPLETED", running=False, gpus=2, submit=1, start=2, end=52,
        wait=1, elapsed=50, gpu_seconds=gpu_seconds, span_start=2, span_end=52,
        pool=pool_usage(comment),
    )  # fmt: skip


def test_the_word_is_one_word_and_reads_back() -> None:
    token = usage_token("vm-0", _totals(), lost=2)
    assert " " not in token and "'" not in token
    comment = with_node_words("acbslurm:gpus=vm-0:0=GPU-a admins-note", "vm-0", [token])
    (word,) = parse_usage(comment)
    assert word["node"] == "vm-0" and word["leased"] == 10.0 and word["lost"] == 2
    assert {(u["key"], u["model"]): u["gpu_seconds"] for u in word["use"]} == {
        ("alice", "model-a"): 6.0,
        ("ci-bot", "org/m:1"): 3.0,
        ("-", "org/m:1"): 1.0,
    }
    # written again (a retry): replaced, never twice; the other words kept
    again = with_node_words(comment, "vm-0", [token])
    assert again.split().count(token) == 1 and again.startswith("acbslurm:gpus=vm-0:0=GPU-a")


def test_more_names_than_a_word_holds_are_summed_under_a_dash() -> None:
    t = Totals()
    for i in range(MAX_ENTRIES + 5):
        t.add_request(f"n{i}", "m", 1, 1)
        t.add_lease("m", 1.0, {f"n{i}": 1.0})
    (word,) = parse_usage(usage_token("n", t))
    assert len(word["use"]) == MAX_ENTRIES + 1
    assert sum(u["gpu_seconds"] for u in word["use"]) == pytest.approx(t.leased_total)


def test_the_word_stays_under_its_bound_whatever_the_pool_wrote() -> None:
    # 200 keys of 128-character names and 200 budgets: about 96 KB unbounded.
    t = Totals()
    for i in range(MAX_ENTRIES):
        name = f"{i:03d}" + "n" * 125
        t.add_request(name, "m", 1, 1)
        t.add_lease("m", 1.0 + i, {name: 1.0 + i})
        t.budgets[name] = {"gpu_seconds": 1e9, "period": "month", "start": 1, "used": 1.0}
    token = usage_token("n", t)
    assert len(token) <= MAX_WORD
    (word,) = parse_usage(token)
    assert word["budgets"] == []  # dropped first
    assert ("-", "-") in {(u["key"], u["model"]) for u in word["use"]}
    assert sum(u["requests"] for u in word["use"]) == MAX_ENTRIES
    assert sum(u["gpu_seconds"] for u in word["use"]) == pytest.approx(t.leased_total)


def test_a_name_never_reads_back_as_a_budget() -> None:
    t = Totals()
    t.use[("budget.x", "m")] = [1, 0, 0, 1.0]
    with pytest.raises(ValueError, match="not a name"):
        usage_token("n", t)
    # A word written before: the row is a NAME,MODEL row; a budget needs its period.
    (word,) = parse_usage("acbslurm:usage=n;leased=1;budget.x,m=1,2,3,4.0")
    assert word["budgets"] == [] and word["use"][0]["key"] == "budget.x"
    assert parse_usage("acbslurm:usage=n;leased=1;budget.x=1,2,3,4.0") == []


def test_a_bad_name_is_refused_and_a_bad_word_skipped() -> None:
    t = Totals()
    t.use[("a b", "m")] = [1, 0, 0, 1.0]
    with pytest.raises(ValueError, match="not a name"):
        usage_token("n", t)
    assert parse_usage("acbslurm:usage=n;leased=x acbslurm:usage=n;leased=1;a,m=1") == []
    assert pool_usage("acbslurm:gpus=n:0=GPU-a") is None


def test_a_pool_job_shows_allocated_leased_idle_and_the_shares() -> None:
    job = _job(usage_token("vm-0", _totals()))
    rec = pool_record(job)
    assert rec is not None
    assert rec["allocated_gpu_seconds"] == 100 and rec["leased_gpu_seconds"] == 10.0
    assert rec["idle_gpu_seconds"] == 90.0
    assert sum(u["gpu_seconds"] for u in rec["usage"]) == rec["leased_gpu_seconds"]
    line = pool_line(job)
    assert "10.0 of 100 GPU-seconds leased, 90.0 idle; by key: alice 6.0, ci-bot 3.0, - 1.0" in line
    assert pool_record(_job("")) is None


def test_by_key_adds_up_over_pool_jobs_and_skips_the_others() -> None:
    jobs = [
        _job(usage_token("vm-0", _totals()), job_id="7"),
        _job(usage_token("vm-0", _totals()), job_id="8"),
        _job("", job_id="9"),
    ]
    out = io.StringIO()
    write_by_key("json", out, META, jobs)
    body = json.loads(out.getvalue())
    assert body["totals"]["pool_jobs"] == 2
    assert body["totals"]["leased_gpu_seconds"] == 20.0
    assert body["totals"]["idle_gpu_seconds"] == 180.0
    alice = next(r for r in body["keys"] if r["key"] == "alice")
    assert alice["jobs"] == 2 and alice["requests"] == 2 and alice["gpu_seconds"] == 12.0
    assert sum(r["share"] for r in body["keys"]) == pytest.approx(1.0)
    table = io.StringIO()
    write_by_key("table", table, META, jobs)
    assert "# total: 2 pool jobs, 200 GPU-seconds allocated, 20.0 leased" in table.getvalue()
    text = io.StringIO()
    write_by_key("csv", text, META, jobs)
    assert text.getvalue().splitlines()[0].startswith("key,model,jobs,requests")


def test_in_another_users_pool_a_viewer_gets_only_their_own_keys_rows() -> None:
    """user2 called user1's pool with a key named ``alice`` (as if alice were user2's
    login): alice's rows only, none of the pool's totals and no other name."""
    out = io.StringIO()
    theirs = [_job(usage_token("vm-0", _totals()), job_id="7"), _job("", job_id="9")]
    write_by_key("json", out, META, [], theirs, "alice")
    body = json.loads(out.getvalue())
    assert [(r["key"], r["model"], r["gpu_seconds"]) for r in body["keys"]] == [
        ("alice", "model-a", 6.0)
    ]
    t = body["totals"]
    assert (t["pool_jobs"], t["allocated_gpu_seconds"], t["leased_gpu_seconds"]) == (0, 0, 0)
    assert t["others_pool_jobs"] == 1 and t["keys_gpu_seconds"] == 6.0
    table = io.StringIO()
    write_by_key("table", table, META, [], theirs, "nobody")  # no row of theirs is nobody's
    assert "other user(s)' pool jobs" not in table.getvalue()
    assert "alice" not in table.getvalue() and "ci-bot" not in table.getvalue()


def test_by_key_shows_each_budget_and_its_periods_use() -> None:
    """A pool's budgets (serve/limits.py) go from its totals file through the epilog's
    word to `report --by key`: the newest period's use of each, as its newest job kept
    it; in another user's pool, only the viewer's name's."""
    day = 1_765_065_600  # 2025-12-07 00:00 UTC
    older, newer = _totals(), _totals()
    older.budgets = {"alice": {"gpu_seconds": 100.0, "period": "day", "start": day, "used": 6.0}}
    newer.budgets = {
        "alice": {"gpu_seconds": 100.0, "period": "day", "start": day, "used": 12.0},
        "ci-bot": {"gpu_seconds": 3600.0, "period": "month", "start": day - 6 * 86400, "used": 3},
    }
    kept = Totals.from_dict(json.loads(json.dumps(newer.as_dict())))  # the totals file
    assert kept.budgets == newer.budgets
    (word,) = parse_usage(usage_token("vm-0", kept))
    assert word["budgets"][0] == {
        "key": "alice",
        "gpu_seconds": 100.0,
        "period": "day",
        "start": day,
        "used": 12.0,
    }
    jobs = [_job(usage_token("vm-0", t), job_id=i) for t, i in ((newer, "8"), (older, "7"))]
    out = io.StringIO()
    write_by_key("json", out, META, jobs)
    budgets = json.loads(out.getvalue())["budgets"]
    assert budgets[0] == {
        "key": "alice",
        "gpu_seconds": 100.0,
        "period": "day",
        "period_start": "2025-12-07 00:00 UTC",
        "used": 12.0,
        "remaining": 88.0,
        "job": "8",
    }
    assert budgets[1]["key"] == "ci-bot" and budgets[1]["period_start"] == "2025-12-01 00:00 UTC"
    table = io.StringIO()
    write_by_key("table", table, META, jobs)
    assert (
        "# budget alice: 100 GPU-seconds per day; 12.0 used (12.0%) in the day from "
        "2025-12-07 00:00 UTC, as of job 8\n"
    ) in table.getvalue()
    theirs = io.StringIO()
    write_by_key("json", theirs, META, [], jobs, "alice")
    assert [b["key"] for b in json.loads(theirs.getvalue())["budgets"]] == ["alice"]
