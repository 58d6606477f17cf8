"""Waiting for slurmdbd to store the demo's jobs, and the usage report it then runs."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from fake_slurm import FakeSlurm

from acbslurm.demo import accounted
from acbslurm.demo.accounted import all_final, usage_report, wait_until_stored
from acbslurm.slurm.jobparse import parse_sacct


class Clock:
    """The demo's clock: sleeping moves it, nothing waits."""

    def __init__(self) -> None:
        self.now = 0.0

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(
        accounted, "time", SimpleNamespace(monotonic=lambda: clock.now, sleep=clock.sleep)
    )
    return clock


@pytest.fixture
def env(fake_slurm: FakeSlurm) -> dict[str, str]:
    """The environment the demo's own Slurm calls get (it replaces ours)."""
    path = str(fake_slurm.bin_dir)
    return {"PATH": path, "SLURM_CONF": "/sb/slurm.conf", "ACBSLURM_DB_CONFIG": "/sb/db.cnf"}


def test_a_cancelled_by_uid_state_is_final_at_the_first_answer(
    fake_slurm: FakeSlurm, env: dict[str, str], clock: Clock
) -> None:
    # sacct prints "CANCELLED by 0" for a job root cancelled: the words after the state
    # once made the demo split the rows wrongly and wait its whole 30 s.
    fake_slurm.add_job("12", "COMPLETED")
    fake_slurm.add_job("13", "CANCELLED by 0")
    assert wait_until_stored(["12", "13"], env=env) is True
    calls = fake_slurm.calls()
    assert [c.cmd for c in calls] == ["sacct"] and clock.now == 0
    assert "-X" in calls[0].argv and calls[0].value("-j") == "12,13"
    assert {k: calls[0].env.get(k) for k in env} == env


def test_waits_until_every_job_is_stored_as_ended(
    fake_slurm: FakeSlurm, env: dict[str, str], clock: Clock
) -> None:
    # slurmdbd has nothing yet; then 12 ended; then 13 running; then 13 failed.
    fake_slurm.add_job("12", "COMPLETED", stored=False, sacct_next=[{"stored": True}])
    fake_slurm.add_job(
        "13", "RUNNING", stored=False, sacct_next=[{}, {"stored": True}, {"state": "FAILED"}]
    )
    assert wait_until_stored(["12", "13"], env=env, interval=0.5) is True
    assert len(fake_slurm.calls("sacct")) == 4 and clock.now == 1.5


def test_gives_up_after_the_timeout(
    fake_slurm: FakeSlurm, env: dict[str, str], clock: Clock
) -> None:
    fake_slurm.add_job("12", "COMPLETING")
    assert wait_until_stored(["12"], env=env, timeout=2, interval=0.5) is False
    assert clock.now == 2 and len(fake_slurm.calls("sacct")) == 5


def test_slurmdbd_not_answering_is_waited_for(
    fake_slurm: FakeSlurm, env: dict[str, str], clock: Clock
) -> None:
    fake_slurm.respond("sacct", stderr="sacct: error: slurmdbd: Connection refused\n", rc=1)
    assert wait_until_stored(["12"], env=env, timeout=1, interval=0.5) is False
    assert clock.now == 1 and len(fake_slurm.calls("sacct")) == 3


@pytest.mark.parametrize(
    ("text", "final"),
    [
        ("12|COMPLETED|||||||0:0|p1|None|x\n13|CANCELLED by 1001|||||||0:15|p1|None|a|b\n", True),
        ("12|COMPLETED|||||||0:0|p1|None|x\n", False),  # 13 not stored yet
        ("12|COMPLETED|||||||0:0|p1|None|x\n13|PENDING|||||||0:0|p1|None|x\n", False),
        ("12|TIMEOUT|||||||0:0|p1|None|x\n13|OUT_OF_MEMORY|||||||0:125|p1|None|x\n", True),
        ("", False),
    ],
)
def test_all_final(text: str, final: bool) -> None:
    assert all_final(["12", "13"], parse_sacct(text)) is final


def test_usage_report_runs_acbslurm_report_with_the_given_env(tmp_path: Path) -> None:
    # A stand-in for `python -m acbslurm`: prints what it was run with.
    show = "import os, sys; print(sys.argv[1:], os.environ.get('WHO'), os.environ.get('HOME'))"
    env = {"WHO": "the demo", "PATH": str(tmp_path)}
    text = usage_report([sys.executable, "-c", show], "user1", 1700000000, env=env)
    argv = ["report", "--user", "user1", "--start", "@1700000000", "--by", "job"]
    assert text == f"{argv} the demo None"
