"""Waiting for slurmdbd to store the demo's jobs, and the usage report it then runs."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace
from typing import Any

import pytest

from acbslurm.demo import usage
from acbslurm.demo.usage import all_final, usage_report, wait_until_stored
from acbslurm.slurm.jobs import parse_sacct

ENV = {"PATH": "/usr/bin", "SLURM_CONF": "/sb/slurm.conf", "ACBSLURM_DB_CONFIG": "/sb/db.cnf"}


def _asked_fields(argv: list[str]) -> list[str]:
    for i, arg in enumerate(argv):
        if arg == "-o":
            return argv[i + 1].split(",")
        if arg.startswith("--format="):
            return arg.split("=", 1)[1].split(",")
    raise AssertionError(f"no sacct fields in {argv}")


class FakeSacct:
    """sacct as a subprocess: prints the asked columns, ``|``-separated, per job."""

    def __init__(self, answers: list[dict[str, str]]) -> None:
        self.answers = answers  # one {job id: State} per call; the last one repeats
        self.calls: list[tuple[list[str], Any]] = []
        self.now = 0.0

    def run(self, argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append((argv, kw.get("env")))
        if argv[0] != "sacct":
            return subprocess.CompletedProcess(argv, 0, "JOBS TABLE\n\n", "")
        states = self.answers[min(len(self.calls) - 1, len(self.answers) - 1)]
        fields = _asked_fields(argv)
        rows = [
            "|".join({"JobID": j, "State": s}.get(f, "") for f in fields) for j, s in states.items()
        ]
        return subprocess.CompletedProcess(argv, 0, "".join(r + "\n" for r in rows), "")

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def fake_sacct(monkeypatch: pytest.MonkeyPatch) -> Any:
    def install(answers: list[dict[str, str]]) -> FakeSacct:
        fake = FakeSacct(answers)
        monkeypatch.setattr(subprocess, "run", fake.run)
        clock = SimpleNamespace(monotonic=lambda: fake.now, sleep=fake.sleep)
        monkeypatch.setattr(usage, "time", clock)
        return fake

    return install


def test_a_cancelled_by_uid_state_is_final_at_the_first_answer(fake_sacct: Any) -> None:
    # sacct prints "CANCELLED by 0" for a job root cancelled: the words after the state
    # once made the demo split the rows wrongly and wait its whole 30 s.
    fake = fake_sacct([{"12": "COMPLETED", "13": "CANCELLED by 0"}])
    assert wait_until_stored(["12", "13"], env=ENV) is True
    assert len(fake.calls) == 1 and fake.now == 0
    argv, env = fake.calls[0]
    assert argv[0] == "sacct" and "-X" in argv and "12,13" in argv
    assert env == ENV


def test_waits_until_every_job_is_stored_as_ended(fake_sacct: Any) -> None:
    fake = fake_sacct(
        [
            {},  # slurmdbd has nothing yet
            {"12": "COMPLETED"},
            {"12": "COMPLETED", "13": "RUNNING"},
            {"12": "COMPLETED", "13": "FAILED"},
        ]
    )
    assert wait_until_stored(["12", "13"], env=ENV, interval=0.5) is True
    assert len(fake.calls) == 4 and fake.now == 1.5


def test_gives_up_after_the_timeout(fake_sacct: Any) -> None:
    fake = fake_sacct([{"12": "COMPLETING"}])
    assert wait_until_stored(["12"], env=ENV, timeout=2, interval=0.5) is False
    assert fake.now == 2 and len(fake.calls) == 5


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


def test_usage_report_runs_acbslurm_report_with_the_given_env(fake_sacct: Any) -> None:
    fake = fake_sacct([{}])
    text = usage_report(["py", "-m", "acbslurm"], "user1", 1700000000, env=ENV)
    assert text == "JOBS TABLE"
    argv, env = fake.calls[0]
    assert argv == [
        "py",
        "-m",
        "acbslurm",
        "report",
        "--user",
        "user1",
        "--start",
        "@1700000000",
        "--by",
        "job",
    ]
    assert env == ENV
