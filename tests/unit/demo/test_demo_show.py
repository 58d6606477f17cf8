"""The demo's text and JSON: the phase table, the header, the results document."""

from __future__ import annotations

import json

from acbslurm.demo.experiment import JobTrace, Phase
from acbslurm.demo.show import as_json, header, phase_table, progress
from acbslurm.slurm.jobtypes import JobInfo

D = "2026-11-30T01:00:"


def _phase() -> Phase:
    phase = Phase(
        2,
        [
            JobTrace("10", 6, ["Resources"], "COMPLETED", D + "00", D + "07", D + "13", [1]),
            JobTrace(
                "9", 6, [], "COMPLETED", D + "00", D + "01", D + "07", [0], ["GPU-a"], "job record"
            ),
        ],
        ["job 10 did something odd"],
    )
    return phase


def test_phase_table_sorts_by_job_id_and_aligns_columns() -> None:
    assert phase_table(_phase(), 2).splitlines() == [
        "",
        "2 job(s) of 1 GPU on a node with 2 GPUs:",
        "  JOB  GPU  UUID                WAITED  PENDING REASONS  RAN",
        "  9    0    GPU-a (job record)  1 s     -                01:00:01-01:00:07 COMPLETED",
        "  10   1    -                   7 s     Resources        01:00:07-01:00:13 COMPLETED",
        "  job 10 waited 7 s for a free GPU",
        "  PROBLEM: job 10 did something odd",
    ]


def test_unfinished_job_shows_dashes() -> None:
    phase = Phase(1, [JobTrace("5", 6, state="PENDING", submit=D + "00")])
    row = phase_table(phase, 2).splitlines()[3]
    assert row == "  5    -    -     0 s     -                --- PENDING"


def test_header_and_progress() -> None:
    assert header("/sb", 2, "user1", "/x.yaml", False) == (
        "Sandbox /sb: 2 GPUs, jobs run as user1\nJob spec: /x.yaml (sleep)"
    )
    assert header("/sb", 2, "user1", "/x.yaml", True).endswith("(container)")
    info = JobInfo("7", "PENDING", reason="Resources")
    assert progress(info) == "  7 PENDING (Resources)"


def test_json_document() -> None:
    doc = json.loads(as_json(False, 2, [_phase()]))
    assert doc["ok"] is False and doc["gpus"] == 2
    assert doc["phases"][0]["count"] == 2
    assert doc["phases"][0]["problems"] == ["job 10 did something odd"]
    assert [j["job_id"] for j in doc["phases"][0]["jobs"]] == ["10", "9"]
    assert doc["phases"][0]["jobs"][0]["waited_s"] == 7.0
