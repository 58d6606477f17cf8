"""The experiment: its checks on job traces, and one phase on a stand-in Slurm."""

from __future__ import annotations

from pathlib import Path

from fake_slurm import FakeSlurm

from acbslurm.demo.experiment import JobTrace, check_phase, run_phase


def t(jid: str, gpu: int, submit: str, start: str, end: str, reasons: list[str]) -> JobTrace:
    d = "2026-11-30T01:00:"
    return JobTrace(jid, 1, reasons, "COMPLETED", d + submit, d + start, d + end, [gpu])


def test_check_phase_accepts_the_expected_behaviour() -> None:
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


def test_run_phase_queries_with_the_slurm_env_and_asks_only_about_unfinished_jobs(
    fake_slurm: FakeSlurm, tmp_path: Path
) -> None:
    path = str(fake_slurm.bin_dir)
    job_env = {"PATH": path, "HOME": str(tmp_path), "WHO": "job"}  # sbatch's: the job's
    slurm_env = {"PATH": path, "HOME": "/root", "WHO": "us"}  # our squeue, sacct, scontrol
    d = "2026-11-30T01:00:"
    run = {"state": "RUNNING", "node": "node1", "start": d + "01", "elapsed": "0:01"}
    done = {"state": "COMPLETED", "end": d + "05", "exit_code": "0:0"}
    later = dict(done, end=d + "09")
    # Each squeue call moves the clock one step (after its answer): 100 is seen ended by
    # the fourth call, 101 by the sixth.
    fake_slurm.plan("100", submit=d + "00", gpus=[0], next=[run, {}, done])
    fake_slurm.plan("101", submit=d + "00", gpus=[1], next=[run, {}, {}, {}, later])
    seen: list[tuple[str, str]] = []
    phase = run_phase(
        [("#!/bin/sh\n", 1.0), ("#!/bin/sh\n", 1.0)],
        user=None,
        env=job_env,
        slurm_env=slurm_env,
        cwd=str(tmp_path),
        record_dir="",
        inventory={0: "GPU-a", 1: "GPU-b"},
        timeout=30,
        interval=0,
        on_update=lambda info: seen.append((info.job_id, info.state)),
    )
    assert [(j.job_id, j.state, j.gpu_uuids) for j in phase.jobs] == [
        ("100", "COMPLETED", ["GPU-a"]),
        ("101", "COMPLETED", ["GPU-b"]),
    ]
    assert phase.problems == []
    # Each change reported once, finished jobs included.
    assert seen == [
        ("100", "PENDING"),
        ("101", "PENDING"),
        ("100", "RUNNING"),
        ("101", "RUNNING"),
        ("100", "COMPLETED"),
        ("101", "COMPLETED"),
    ]
    calls = fake_slurm.calls()
    assert {c.env["WHO"] for c in calls if c.cmd == "sbatch"} == {"job"}
    assert {c.env["WHO"] for c in calls if c.cmd != "sbatch"} == {"us"}
    # Once 100 has ended (fourth poll) only 101 is asked about; scontrol once per job.
    asked = [c.value("--jobs") for c in fake_slurm.calls("squeue")]
    assert asked == ["100,101"] * 4 + ["101"] * 2
    # (A query slower than a second is followed by `scontrol ping`, the controller's
    # watchdog: a loaded machine's, not the demo's own question.)
    shown = [c.argv[-1] for c in fake_slurm.calls("scontrol") if c.argv[-1] != "ping"]
    assert sorted(shown) == ["100", "101"]
