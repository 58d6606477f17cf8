"""The experiment: the seed's checks on job traces, and one phase on a stand-in Slurm."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from acbslurm.demo import experiment
from acbslurm.demo.experiment import JobTrace, check_phase, run_phase
from acbslurm.slurm.jobtypes import JobInfo, SubmitResult


def t(jid: str, gpu: int, submit: str, start: str, end: str, reasons: list[str]) -> JobTrace:
    d = "2026-11-30T01:00:"
    return JobTrace(jid, 1, reasons, "COMPLETED", d + submit, d + start, d + end, [gpu])


def test_check_phase_accepts_the_seed_behaviour() -> None:
    jobs = [
        t("8", 0, "00", "01", "05", []),
        t("9", 1, "00", "01", "09", ["Priority"]),
        t("10", 0, "00", "05", "09", ["Priority", "Resources"]),
        t("11", 1, "00", "09", "13", ["Resources"]),
    ]
    assert check_phase(jobs, gpus_on_node=2) == []


def test_check_phase_finds_shared_gpu_and_early_start() -> None:
    jobs = [
        t("8", 0, "00", "01", "05", []),
        t("9", 1, "00", "01", "09", []),
        t("10", 0, "00", "03", "09", ["Resources"]),  # started before GPU 0 was freed
    ]
    problems = check_phase(jobs, gpus_on_node=2)
    assert any("held GPU [0] at once" in p for p in problems)
    assert any("job 10 did not start on a GPU freed" in p for p in problems)


def test_check_phase_two_jobs_must_overlap() -> None:
    jobs = [t("1", 0, "00", "01", "03", []), t("2", 1, "00", "04", "06", [])]
    assert any("did not run at the same time" in p for p in check_phase(jobs, gpus_on_node=2))


def test_run_phase_queries_with_the_slurm_env_and_submits_with_the_job_env(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job_env = {"HOME": "/home/user1", "SLURM_CONF": "/sb/slurm.conf"}
    slurm_env = {"HOME": "/root", "SLURM_CONF": "/sb/slurm.conf"}
    submitted: list[Mapping[str, str] | None] = []
    queried: list[Mapping[str, str] | None] = []
    polls = iter(("RUNNING", "COMPLETED"))

    def fake_submit(script: str, **kw: Any) -> SubmitResult:
        submitted.append(kw["env"])
        return SubmitResult([str(7 + len(submitted))])

    def fake_query(ids: Sequence[str], **kw: Any) -> list[JobInfo]:
        queried.append(kw["env"])
        state = next(polls)
        d = "2026-11-30T01:00:"
        return [
            JobInfo(
                j,
                state,
                submit_time=d + "00",
                start_time=d + "01",
                end_time=d + "05" if state == "COMPLETED" else "",
                gpu_indices=[i],
            )
            for i, j in enumerate(ids)
        ]

    monkeypatch.setattr(experiment, "submit_script", fake_submit)
    monkeypatch.setattr(experiment, "query_jobs", fake_query)
    phase = run_phase(
        [("#!/bin/sh\n", 1.0), ("#!/bin/sh\n", 1.0)],
        user=1001,
        env=job_env,
        slurm_env=slurm_env,
        cwd="/home/user1",
        record_dir="",
        inventory={0: "GPU-a", 1: "GPU-b"},
        timeout=10,
        interval=0,
    )
    assert submitted == [job_env, job_env]
    assert queried == [slurm_env, slurm_env]
    assert [(j.job_id, j.state, j.gpu_uuids) for j in phase.jobs] == [
        ("8", "COMPLETED", ["GPU-a"]),
        ("9", "COMPLETED", ["GPU-b"]),
    ]
    assert phase.problems == []
