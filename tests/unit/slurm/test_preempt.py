"""A preempted job's grace from `scontrol -o show job` (slurm/preempt.py)."""

from __future__ import annotations

import time

import pytest

from acbslurm.slurm.preempt import parse_grace_left, release_ends_as_preempted

NOW = time.mktime(time.strptime("2026-12-04T06:00:00", "%Y-%m-%dT%H:%M:%S"))
LINE = (
    "JobId=6817042 JobName=train UserId=user1(1001) JobState=RUNNING Reason=None "
    "RunTime=00:01:02 TimeLimit=01:00:00 SubmitTime=2026-12-04T05:58:00 "
    "StartTime=2026-12-04T05:58:58 EndTime={end} PreemptTime={preempt} "
    "Partition=p1 Command=/home/user1/a job.sh"
)


@pytest.mark.parametrize(
    ("end", "preempt", "want"),
    [
        ("2026-12-04T06:00:30", "2026-12-04T06:00:00", 30.0),  # preempted, GraceTime=30
        ("2026-12-04T06:58:58", "None", None),  # running, not preempted
        ("2026-12-04T06:00:00", "None", None),  # cancelled or at its time limit
        ("Unknown", "2026-12-04T06:00:00", None),
    ],
)
def test_grace_left(end: str, preempt: str, want: float | None) -> None:
    assert parse_grace_left(LINE.format(end=end, preempt=preempt), NOW) == want


def test_no_line_is_not_preempted() -> None:
    assert parse_grace_left("", NOW) is None


def test_a_job_without_a_time_limit_has_its_partitions_grace() -> None:
    """scontrol shows EndTime=Unknown for a job without a time limit, preempted or not."""
    line = LINE.format(end="Unknown", preempt="2026-12-04T05:59:50")
    assert parse_grace_left(line, NOW, partition_grace=20) == 10.0
    assert parse_grace_left(line, NOW, partition_grace=0) is None
    assert parse_grace_left(LINE.format(end="Unknown", preempt="None"), NOW, 20) is None


@pytest.mark.parametrize(
    ("said", "want"),
    [
        ("slurm 22.05.8", False),
        ("slurm 23.11.11", False),
        ("slurm 24.11.7", True),
        ("slurm 25.11.7", True),
        ("slurm 26.05.3", True),
        ("", False),
        ("scontrol: command not found", False),
    ],
)
def test_which_releases_end_a_preempted_job_as_its_preemption_says(said: str, want: bool) -> None:
    """From 24.11 (23.11's source lacks it); what is not a release: held (False)."""
    assert release_ends_as_preempted(said) is want
