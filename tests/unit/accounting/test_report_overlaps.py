"""Two jobs on one GPU at once are a data error: counted and named by `report` (text,
JSON) and outlined on the HTML timeline, never drawn as if nothing were wrong."""

from __future__ import annotations

import io
import json
import re
import time

from test_report_html import META, T0, history, job, page

from acbslurm.accounting.gpuseconds import JobUsage
from acbslurm.accounting.grouping import Aggregator
from acbslurm.accounting.output import write_json, write_table
from acbslurm.accounting.overlaps import OverlapCheck

TABLE_META = {
    **META,
    "schema_version": 1,
    "slurm_release": "22.05",
    "definition_text": "sacct",
    "gpu_utilization": {"note": "-"},
}


def array_gone_wrong() -> list[JobUsage]:
    """An array's tasks 1 and 2 both recorded on vm:0 (its last task's GPU) while task 1
    really ran on vm:1; task 3 ran after them on vm:0 (touching, not overlapping)."""
    return [
        job(1, T0, T0 + 100, "vm:0=GPU-a"),
        job(2, T0 + 10, T0 + 90, "vm:0=GPU-a"),
        job(3, T0 + 100, T0 + 200, "vm:0=GPU-a"),
        job(4, T0 + 10, T0 + 90, "vm:1=GPU-b"),
    ]


def test_the_check_finds_each_pair_once_and_nothing_in_back_to_back_jobs() -> None:
    check = OverlapCheck(T0 + 1000)
    for j in array_gone_wrong():
        check.add(j)
    assert [(o.first, o.second, o.start, o.end) for o in check.found] == [
        ("1", "2", T0 + 10, T0 + 90)
    ]
    clean = OverlapCheck(T0)
    for j in history(2000):
        clean.add(j)
    assert clean.found == []


def test_a_running_job_overlaps_until_now() -> None:
    check = OverlapCheck(T0 + 500)
    check.add(job(1, T0, 0, "vm:0=GPU-a"))  # running: no end yet
    assert [o.first for o in check.add(job(2, T0 + 400, T0 + 450, "vm:0=GPU-a"))] == ["1"]


def test_the_table_marks_the_job_and_counts_in_the_footer() -> None:
    out = io.StringIO()
    write_table(out, TABLE_META, array_gone_wrong(), Aggregator("job", "sacct"))
    text = out.getvalue()
    row2 = next(line for line in text.splitlines() if line.startswith("2 "))
    assert row2.endswith("vm:0 !overlaps 1")
    assert "# DATA ERROR: 1 GPU overlap(s)" in text
    assert re.search(r"#   jobs 1 and 2 both on vm:0 \(GPU-a\) from \S+ to \S+", text)
    out = io.StringIO()
    write_table(out, TABLE_META, history(100), Aggregator("job", "sacct"))
    assert "DATA ERROR" not in out.getvalue() and "!overlaps" not in out.getvalue()


def test_json_lists_every_overlap() -> None:
    for by in ("job", "user"):
        out = io.StringIO()
        write_json(out, META, array_gone_wrong(), Aggregator(by, "sacct"))
        errors = json.loads(out.getvalue())["data_errors"]
        assert errors["gpu_overlaps"] == 1
        o = errors["overlaps"][0]
        assert (o["node"], o["index"], o["uuid"], o["job_ids"]) == ("vm", 0, "GPU-a", ["1", "2"])


def test_the_timeline_outlines_the_jobs_and_says_how_many() -> None:
    text = page(array_gone_wrong())
    assert "Data error: 1 GPU overlap(s)" in text
    outlined = re.findall(r'class="overlap"><title>job (\d+) ', text)
    assert sorted(outlined) == ["1", "2"]
    assert "Data error" not in page(history(100))


def test_the_check_stays_fast_on_a_big_window() -> None:
    jobs = history(20_000)
    t = time.perf_counter()
    check = OverlapCheck(T0)
    for j in jobs:
        check.add(j)
    assert check.found == [] and time.perf_counter() - t < 2.0
