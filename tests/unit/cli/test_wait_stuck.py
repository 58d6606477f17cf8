"""`submit --wait` ends on a job that will never start (a dependency that failed...)
and says when a job it follows was requeued; against the fake Slurm commands."""

from __future__ import annotations

import getpass
from pathlib import Path

import pytest
from cli_run import Ran, acbslurm
from fake_slurm import FakeSlurm

from acbslurm.cli import waiting
from acbslurm.slurm.jobtypes import JobInfo

T0 = "2026-11-30T01:00:00"
T1 = "2026-11-30T01:05:00"
ME = getpass.getuser()
RUN = {"state": "RUNNING", "node": "vm", "start": T0, "reason": "", "gpus": [0]}
DONE = {"state": "COMPLETED", "end": T1, "exit_code": "0:0", "reason": ""}
NEVER = {"reason": "DependencyNeverSatisfied"}


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    monkeypatch.setenv("ACBSLURM_RECORD_DIR", str(tmp_path / "records"))
    (tmp_path / "out").mkdir()
    return tmp_path


def spec(cwd: Path, extra: str = "") -> str:
    path = cwd / "job.yaml"
    path.write_text(
        "name: t\npartition: p1\noutput: out/%j.out\ncommand: ['true']\n"
        "dependency: afterok:41\n" + extra
    )
    return str(path)


def submit(*args: str) -> Ran:
    return acbslurm("submit", *args, "--acbslurm", "/x/acbslurm", "--interval", "0.1")


def test_wait_ends_on_a_dependency_that_can_never_be_met(cwd: Path, fake_slurm: FakeSlurm) -> None:
    fake_slurm.set_cluster(accounts={"user1": [ME]})
    fake_slurm.set_defaults(reason="Dependency", next=[{}, NEVER])
    res = submit(spec(cwd), "--wait")
    assert res.exit_code == 1
    err = res.stderr
    assert "100 PENDING (Dependency)" in err
    assert (
        "job 100 will never start: PENDING, reason DependencyNeverSatisfied (dependency afterok:41)"
    ) in err
    assert "the dependency failed" in err
    assert "`acbslurm cancel 100` (or `scancel 100`)" in err
    assert "1 of 1 jobs did not complete." in err


def test_wait_follows_the_others_to_their_end_first(cwd: Path, fake_slurm: FakeSlurm) -> None:
    fake_slurm.set_cluster(accounts={"user1": [ME]})
    fake_slurm.set_defaults(reason="Priority")
    fake_slurm.plan("100", next=[NEVER])
    fake_slurm.plan("101", next=[{}, RUN, RUN, RUN, DONE])
    res = submit(spec(cwd), "-n", "2", "--wait")
    assert res.exit_code == 1
    err = res.stderr
    assert "101 COMPLETED" in err  # followed to its end, though 100 never starts
    assert "job 100 will never start" in err and "job 101" not in err.split("101 COMPLETED")[1]
    assert "1 of 2 jobs did not complete." in err


def test_wait_ends_on_a_deleted_reservation_with_json(cwd: Path, fake_slurm: FakeSlurm) -> None:
    """squeue shows the job's description there, naming the reservation."""
    fake_slurm.set_cluster(accounts={"user1": [ME]})
    gone = {"state": "RESV_DEL_HOLD", "reason": "Reservation maint was deleted"}
    fake_slurm.set_defaults(reason="Reservation", next=[gone])
    res = submit(spec(cwd), "--wait", "--json")
    assert res.exit_code == 1
    assert '"state": "RESV_DEL_HOLD"' in res.stdout
    assert "job 100 will never start: RESV_DEL_HOLD, reason Reservation maint was deleted" in (
        res.stderr
    )
    assert "the reservation maint was deleted; it stays queued until you cancel it" in res.stderr


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        ("PENDING", "DependencyNeverSatisfied"),
        ("PENDING", "BadConstraints"),
        ("REQUEUE_HOLD", "JobHoldMaxRequeue"),
        ("PENDING", "launch failure limit exceeded requeued held"),
        ("PENDING", "launch failed requeued held"),
        ("PENDING", "ReservationDeleted"),
        ("RESV_DEL_HOLD", "Reservation r1 is invalid"),
    ],
)
def test_reasons_that_never_clear(state: str, reason: str) -> None:
    assert waiting.never_clears(JobInfo("1", state, reason=reason)) is not None


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        ("PENDING", "Dependency"),
        ("PENDING", "Priority"),
        ("PENDING", "Resources"),
        ("PENDING", "JobHeldUser"),  # a hold someone chose, released on purpose
        ("PENDING", "JobHeldAdmin"),
        ("PENDING", "InvalidAccount"),  # slurmctld clears it when the association is back
        ("PENDING", "Reservation"),
        ("PENDING", "Reservation r1 was deleted soon"),
        ("RUNNING", "DependencyNeverSatisfied"),  # a stale reason of a job that runs
        ("FAILED", "BadConstraints"),
    ],
)
def test_reasons_that_clear_or_are_not_waits(state: str, reason: str) -> None:
    assert waiting.never_clears(JobInfo("1", state, reason=reason)) is None


def test_wait_says_a_job_was_requeued(cwd: Path, fake_slurm: FakeSlurm) -> None:
    fake_slurm.set_cluster(accounts={"user1": [ME]})
    back = {"state": "PENDING", "reason": "BeginTime", "start": "", "node": "", "gpus": []}
    again = {**RUN, "start": T1}
    fake_slurm.set_defaults(reason="Priority", next=[RUN, RUN, back, back, again, again, DONE])
    res = submit(spec(cwd), "--wait")
    assert res.exit_code == 0, res.stderr
    line = (
        "job 100 was requeued (preempted, its node failed or `scontrol requeue`): "
        "it waits to run again"
    )
    assert res.stderr.count(line) == 1
    assert res.stderr.count("was requeued") == 1  # its second run is not a third


def test_requeue_line_on_a_terminal_stands_above_the_live_line(
    cwd: Path, fake_slurm: FakeSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(waiting, "is_terminal", lambda: True)
    fake_slurm.set_cluster(accounts={"user1": [ME]})
    again = {**RUN, "start": T1}
    fake_slurm.set_defaults(reason="Priority", next=[RUN, RUN, again, again, DONE])
    res = submit(spec(cwd), "--wait")
    assert res.exit_code == 0, res.stderr
    # the live line cleared, the note on a line of its own, then the live line again
    assert "\rjob 100 was requeued (preempted, its node failed or `scontrol requeue`): " in (
        res.stderr
    )
    assert "it runs again\n\r1 job: 1 RUNNING" in res.stderr


def test_restarts_need_two_start_times_that_differ() -> None:
    restarts = waiting.Restarts()
    assert restarts.seen([JobInfo("1", "RUNNING")]) == []  # no start time said yet
    assert restarts.seen([JobInfo("1", "RUNNING", start_time=T0)]) == []
    assert restarts.seen([JobInfo("1", "SUSPENDED", start_time=T0)]) == []
    # a requeued job's COMPLETING row shows the time of its requeue as its start
    assert restarts.seen([JobInfo("1", "COMPLETING", start_time=T1)]) == []
    assert restarts.seen([JobInfo("1", "COMPLETED", start_time=T0)]) == []  # an end
    assert restarts.seen([JobInfo("2", "PENDING")]) == []  # never ran
    again = restarts.seen([JobInfo("1", "RUNNING", start_time=T0)])
    assert again == []
    assert restarts.seen([JobInfo("1", "RUNNING", start_time=T1)]) == [
        "job 1 was requeued (preempted, its node failed or `scontrol requeue`): it runs again"
    ]


def test_a_requeue_as_the_sandbox_shows_it_is_one_line() -> None:
    """squeue's rows of `scontrol requeue` on 22.05: RUNNING, COMPLETING with the time
    of the requeue as its start, PENDING (BeginTime), then RUNNING from a new start."""
    restarts = waiting.Restarts()
    rows = [
        JobInfo("1", "RUNNING", start_time=T0),
        JobInfo("1", "COMPLETING", start_time=T1),
        JobInfo("1", "PENDING", reason="BeginTime", start_time="2026-11-30T01:07:00"),
        JobInfo("1", "RUNNING", start_time="2026-11-30T01:07:00"),
        JobInfo("1", "COMPLETING", start_time="2026-11-30T01:07:00"),
        JobInfo("1", "COMPLETED", start_time="2026-11-30T01:07:00"),
    ]
    lines = [line for row in rows for line in restarts.seen([row])]
    assert lines == [
        "job 1 was requeued (preempted, its node failed or `scontrol requeue`): "
        "it waits to run again"
    ]
