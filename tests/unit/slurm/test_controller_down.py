"""A controller query (squeue, scontrol show) while slurmctld is down ends as soon as
`scontrol ping` says so, with that one line, instead of after squeue's own retries (18 s
for `squeue --jobs=N` on the sandbox); a controller that answers lets it run on.

Real processes: a squeue that takes long and a scontrol whose ping answers as told, on
the bin dir the commands are run from."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from acbslurm.errors import CommandError
from acbslurm.proc import Watchdog, run
from acbslurm.slurm.commands import CONTROLLER_PATIENCE, ControllerDown
from acbslurm.slurm.jobs import query_jobs


def script(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    # squeue as when slurmctld is down: a long wait, then the error
    script(
        tmp_path / "squeue",
        'sleep "${SQUEUE_WAIT:-30}"; '
        'echo "slurm_load_jobs error: Unable to contact slurm controller" >&2; exit 1',
    )
    return tmp_path


def env(bin_dir: Path, ping: str, code: int) -> dict[str, str]:
    script(bin_dir / "scontrol", f'[ "$1" = ping ] && {{ echo "{ping}"; exit {code}; }}; exit 9')
    return {**os.environ, "ACBSLURM_SLURM_BIN_DIR": str(bin_dir)}


def test_a_down_controller_ends_the_query_with_one_line(bin_dir: Path) -> None:
    t0 = time.monotonic()
    with pytest.raises(ControllerDown) as err:
        query_jobs(["12"], env=env(bin_dir, "Slurmctld(primary) at vm is DOWN", 1))
    took = time.monotonic() - t0
    assert took < CONTROLLER_PATIENCE + 5, took
    assert str(err.value) == (
        "Unable to contact slurm controller: scontrol ping says Slurmctld(primary) at vm is DOWN"
    )


def test_a_controller_that_answers_lets_a_slow_query_finish(bin_dir: Path) -> None:
    row = "12|12|RUNNING|None|0:01|vm|user1|x|x|x|gpu|(null)\\037/tmp\\037job"
    script(bin_dir / "squeue", f"sleep 2; printf '{row}\\n'")
    rows = query_jobs(["12"], env=env(bin_dir, "Slurmctld(primary) at vm is UP", 0))
    assert [(j.job_id, j.state) for j in rows[:1]] == [("12", "RUNNING")]


def test_a_ping_that_says_nothing_clear_lets_the_query_speak(bin_dir: Path) -> None:
    e = {**env(bin_dir, "garbage", 1), "SQUEUE_WAIT": "2"}
    with pytest.raises(CommandError) as err:
        query_jobs(["12"], env=e)
    assert not isinstance(err.value, ControllerDown)
    assert "Unable to contact slurm controller" in str(err.value)


def test_the_watchdog_is_asked_once_and_only_for_slow_commands() -> None:
    asked: list[float] = []
    dog = Watchdog(0.3, lambda: asked.append(time.monotonic()) or "")
    assert run(["true"], watchdog=dog).returncode == 0 and asked == []
    assert run(["sh", "-c", "sleep 1; echo done"], watchdog=dog).stdout == "done\n"
    assert len(asked) == 1
    with pytest.raises(CommandError, match="timed out after 1 s"):
        run(["sleep", "5"], timeout=1, watchdog=dog)
    stop = Watchdog(0.2, lambda: "no use waiting")
    t0 = time.monotonic()
    with pytest.raises(CommandError, match="no use waiting"):
        run(["sleep", "30"], watchdog=stop)
    assert time.monotonic() - t0 < 5
