"""Faults: who used a job's GPUs is never lost silently (docs/serve.md, "Usage").

slurmdbd down when a job that lent its GPUs through its broker ends: the epilog keeps
the job's words in ``<record_dir>/usage-pending/`` and its sender cannot write them into
the job's SystemComment, so they stay; once slurmdbd is back, a later epilog's sender on
the node sends them, and `acbslurm report` shows the job's usage as if nothing happened.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
from sandboxtest import (
    broker_program,
    broker_start,
    submit,
    wait_for_pool_usage,
    wait_gone,
    wait_until,
)

pytestmark = pytest.mark.integration


def test_usage_waits_for_slurmdbd_and_is_sent_by_a_later_epilog(idle: Any, scripts: Path) -> None:
    sb = idle
    d = scripts / f"usage-{id(sb)}"
    d.mkdir(exist_ok=True)
    d.chmod(0o777)
    body = f"""
{broker_start(f"{d}/broker.err")}
{broker_program("train", 1, 1, f"{d}/released")}
until [ -e "{d}/go" ]; do sleep 0.2; done
kill %1; wait
"""
    job = submit(sb, scripts, body, "--gres=gpu:1", "-t", "5")
    wait_until("the program's lease released", (d / "released").exists, 60)
    pending = sb.layout.records / "usage-pending"
    sb.stop_component("slurmdbd")
    try:
        (d / "go").touch()
        wait_gone(sb, job, 60)
        kept = wait_until("the usage kept for later", lambda: list(pending.glob(f"{job}.*.json")))
        assert len(kept) == 1, kept
    finally:
        sb.restart("slurmdbd")

    # A later job's epilog on the node sends it, once slurmdbd has the job's end (which
    # slurmctld sends it when it has reconnected: wait for that state, not for a number
    # of later jobs, which a fast scheduler runs before it).
    def ended_in_slurmdbd() -> bool:
        out = sb.run_slurm(["sacct", "-X", "-n", "-P", "-j", job, "-o", "End"], check=False)
        return any(e and e != "Unknown" for e in out.stdout.split())

    wait_until("slurmdbd to have the job's end", ended_in_slurmdbd, 120)
    # Each later epilog starts a detached sender; one that finds slurmdbd still busy
    # after its restart leaves the file to the next epilog, as on a real node.
    for _ in range(6):
        other = submit(sb, scripts, "true", "--gres=gpu:1", "-t", "1")
        wait_gone(sb, other, 60)
        with contextlib.suppress(AssertionError):
            wait_until("the usage sent", lambda: not list(pending.glob(f"{job}.*.json")), 15)
            break
    assert not list(pending.glob(f"{job}.*.json")), "the usage was never sent"
    assert not list(pending.glob(f"{job}.*.failed"))  # another run's may be there
    got = wait_for_pool_usage(sb, job)
    (row,) = got["usage"]
    assert row["key"] == "train" and 1.0 <= row["gpu_seconds"] < 3.0, got
