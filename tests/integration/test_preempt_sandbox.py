"""A preempted container job keeps its checkpoint and is requeued (issue 28, item 5), on
the sandbox's real Slurm: p1 has GraceTime=15 (templates/sandbox/slurm.conf.j2), and a
job of the hidden `urgent` partition preempts a p1 job with PreemptMode=REQUEUE.

Slurm sends the preempted job's steps SIGTERM at once and ends the job 15 s later. The
container's checkpoint takes 8 s, longer than the run's stop_grace (5 s): before, the
container was killed mid-checkpoint (137) and the job ended FAILED, not requeued. Now
the container has the grace, `acbslurm run` then waits for Slurm to requeue the job,
and the second run (SLURM_RESTART_COUNT=1) resumes from the checkpoint.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from sandboxtest import (
    IMAGE,
    RERUN_WAIT,
    acbslurm_run,
    report_json,
    submit,
    wait_job,
    wait_until,
)

from acbslurm.slurm.preempt import release_ends_as_preempted

pytestmark = pytest.mark.integration

# As a training script would: on SIGTERM, save (8 s), then end.
TRAIN = (
    'echo "run ${SLURM_RESTART_COUNT:-0}"; ckpt=/work/ckpt-$SLURM_JOB_ID; '
    'if [ -f "$ckpt" ]; then echo "resumed from $(cat "$ckpt")"; exit 0; fi; '
    'trap "sleep 8; echo step-42 > $ckpt; echo saved; exit 0" TERM; '
    "while :; do sleep 1; done"
)


def test_a_preempted_job_checkpoints_in_its_grace_time_and_resumes(
    idle: Any, scripts: Path
) -> None:
    sb = idle
    run = acbslurm_run("--mount", f"{scripts}:/work", IMAGE, "--", "sh", "-c", TRAIN)
    job = submit(
        sb,
        scripts,
        f"exec srun {run}",
        "--gres=gpu:2",
        "--time=10",
        "--requeue",
        "--open-mode=append",
    )
    out = scripts / f"out-{job}.txt"
    wait_job(sb, job, ("RUNNING",), 60)
    wait_until("the container's first line", lambda: out.exists() and "run 0" in out.read_text())

    try:
        _preempt_and_rerun(sb, job, out)
    except AssertionError as exc:
        shown = out.read_text() if out.exists() else "(no output)"
        raise AssertionError(f"{exc}\n{out}:\n{shown}") from None

    text = out.read_text()
    assert "the job was preempted: the container has its grace time" in text, text
    # Before 24.11 the run waits for Slurm to end the job (else it ended COMPLETED); from
    # 24.11 Slurm requeues it as the run exits, and a job held to its grace's end would
    # be requeued twice (its second run's end requeued it once more: seen on 25.11.7).
    held = not release_ends_as_preempted(sb.params.slurm_release)
    assert ("waiting for Slurm to requeue or end the job" in text) is held, text
    assert "the job was preempted and its container ended (exit code 0)" in text, text
    mine = ("run ", "saved", "resumed from ")  # the container's own lines, not Slurm's
    lines = [ln for ln in text.splitlines() if ln.startswith(mine)]
    assert lines[:2] == ["run 0", "saved"], text
    assert lines[-2:] == ["run 1", "resumed from step-42"], text
    states = sb.run_slurm(
        ["sacct", "-D", "-X", "-n", "-P", "-j", job, "-o", "State"]
    ).stdout.split()
    # Two runs: the preempted one and the one that completed, never a third.
    assert len(states) == 2, states
    assert states[0] in ("PREEMPTED", "REQUEUED") and states[-1] == "COMPLETED", states
    # The report (sacct's definition: the newest run) says it left the first run out.
    # Like sacct it counts a run eligible before its window's end, "now" in whole
    # seconds: a rerun that became eligible, ran and ended within this very second is
    # not in it yet (seen on 25.11.7: the report showed the first run, PREEMPTED). The
    # job was seen COMPLETED before this second ended: wait for the next one.
    seen = int(time.time())
    wait_until("the second after the job's end", lambda: int(time.time()) > seen, timeout=5)
    doc = report_json(sb, "--start", "now-1h", "--user", "user1")
    (row,) = [j for j in doc["jobs"] if j["job_id"] == job]
    assert row["state"] == "COMPLETED", row
    assert doc["totals"]["left_out_runs"] >= 1 and doc["totals"]["left_out_gpu_seconds"] > 0


def _preempt_and_rerun(sb: Any, job: str, out: Path) -> None:
    """Preempt the job from `urgent`, then start its rerun once it is requeued."""
    # All GPUs are the p1 job's: a job of `urgent` takes them, as another user.
    urgent = sb.run_as(
        sb.params.user2,
        [
            "sbatch",
            "--parsable",
            "-o",
            "/dev/null",
            "-p",
            "urgent",
            "--gres=gpu:2",
            "--wrap",
            "sleep 2",
        ],
    ).stdout.strip()
    wait_until("the checkpoint", lambda: "saved" in out.read_text(), timeout=40)
    wait_job(sb, urgent, ("COMPLETED",), 90)
    fields = wait_job(sb, job, ("PENDING",), 60)
    assert fields.get("Restarts") == "1", fields
    # It starts again on its own once eligible (the sandbox's cred_expire, 10 s).
    wait_job(sb, job, ("COMPLETED",), RERUN_WAIT)
