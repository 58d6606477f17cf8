"""pyslurm_backend's rows: squeue's strings from pyslurm's values (pure functions; the
contract test compares them with squeue's own on the 25.11 leg)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from acbslurm.slurm.pyslurm_backend import display_id, squeue_elapsed


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0:00"), (59, "0:59"), (61, "1:01"), (3600, "1:00:00"), (90061, "1-01:01:01")],
)
def test_elapsed_as_squeue_prints_it(seconds: int, text: str) -> None:
    assert squeue_elapsed(seconds) == text


def job(jid: int, array: int | None = None, task: int | None = None, waiting: str | None = None):  # type: ignore[no-untyped-def]
    return SimpleNamespace(id=jid, array_id=array, array_task_id=task, array_tasks_waiting=waiting)


def test_ids_as_squeue_shows_them() -> None:
    assert display_id(job(7)) == "7"
    assert display_id(job(14, array=12, task=1)) == "12_1"
    # pyslurm reads task id 0 as "no value": an array record that is not the pending
    # rest is still a task.
    assert display_id(job(13, array=12, task=None)) == "12_0"
    assert display_id(job(12, array=12, task=None, waiting="2-5")) == "12_[2-5]"
