"""Job steps a program inside a job starts itself (long-running: the caller spawns them)."""

from __future__ import annotations

from collections.abc import Sequence


def overlap_step_argv(node: str, cmd: Sequence[str]) -> list[str]:
    """``cmd`` as one task on ``node`` of the current job, sharing the job's resources
    with the batch step (``--overlap``); srun passes the environment on (the venv,
    PYTHONPATH) and ends the step when the task fails."""
    return [
        "srun",
        "--nodes=1",
        "--ntasks=1",
        f"--nodelist={node}",
        "--overlap",
        "--kill-on-bad-exit=1",
        "--quiet",
        *cmd,
    ]
