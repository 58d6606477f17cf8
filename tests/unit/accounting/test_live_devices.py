"""Running jobs' devices read from slurmctld (squeue's JobID and AdminComment), where
slurmdbd has none until the job ends."""

from __future__ import annotations

from acbslurm.accounting.live import parse_show_jobs

ROWS = (
    "41|acbslurm:gpus=vm:0=GPU-a,vm:1=GPU-b\n"
    "42|(null)\n"
    "43|note|with bars acbslurm:gpus=vm:2=GPU-c\n"
    "garbage line\n"
)


def test_devices_by_job_id_from_squeues_rows() -> None:
    assert parse_show_jobs(ROWS) == {41: "vm:0=GPU-a,vm:1=GPU-b", 43: "vm:2=GPU-c"}


def test_a_word_inside_another_is_no_token() -> None:
    """A pool's usage word or an admin's note that holds the prefix inside is not one."""
    assert parse_show_jobs("44|x-acbslurm:gpus=vm:0=GPU-z\n") == {}
