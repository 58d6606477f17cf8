"""The experiment: the seed's checks on job traces."""

from __future__ import annotations

from acbslurm.demo.experiment import JobTrace, check_phase


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
