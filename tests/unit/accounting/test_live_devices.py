"""Running jobs' devices read from slurmctld (``scontrol show job -o``), where slurmdbd
has none until the job ends."""

from __future__ import annotations

from acbslurm.accounting.live import parse_show_jobs

LINES = (
    "JobId=41 JobName=a UserId=user1(1001) JobState=RUNNING "
    "AdminComment=acbslurm:gpus=vm:0=GPU-a,vm:1=GPU-b Comment=x\n"
    "JobId=42 JobName=b JobState=RUNNING AdminComment=(null)\n"
    "JobId=43 ArrayJobId=40 ArrayTaskId=3 JobState=RUNNING AdminComment=note "
    "acbslurm:gpus=vm:2=GPU-c\n"
    "garbage line\n"
)


def test_devices_by_job_id_from_scontrols_lines() -> None:
    assert parse_show_jobs(LINES) == {41: "vm:0=GPU-a,vm:1=GPU-b", 43: "vm:2=GPU-c"}
