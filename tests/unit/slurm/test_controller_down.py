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


def test_a_started_query_is_read_once_and_watched_as_a_run_one(
    bin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command started early (``commands.start``: the prolog's scontrol while squeue
    answers) is read by the query's own call instead of starting another, only a call
    with the same command line and nothing else asked of it does, and a controller that
    is down still ends it in about CONTROLLER_PATIENCE with scontrol ping's line."""
    from acbslurm.slurm import commands
    from acbslurm.slurm.jobs import squeue_argv

    log = bin_dir / "runs"
    row = "12|12|RUNNING|None|0:01|vm|user1|x|x|x|gpu|acbslurm:gpus=vm:0=GPU-1\\037/tmp\\037job"
    script(bin_dir / "squeue", f"echo run >> {log}; printf '{row}\\n'")
    monkeypatch.setenv("ACBSLURM_SLURM_BIN_DIR", str(bin_dir))
    commands.start(squeue_argv(["12"], None))
    assert [j.job_id for j in query_jobs(["12"])] == ["12"]
    assert log.read_text() == "run\n" and commands._STARTED == {}
    commands.start(squeue_argv(["12"], None))
    # The started squeue runs on its own: its line may come after the next query's
    # (it did on a loaded machine), so the count below waits for it first.
    deadline = time.monotonic() + 30
    while log.read_text() != "run\n" * 2:
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)
    query_jobs(["12"], env=dict(os.environ))  # another environment: run anew
    assert log.read_text() == "run\n" * 3 and len(commands._STARTED) == 1
    assert [j.job_id for j in query_jobs(["12"])] == ["12"]  # the started one, read now
    assert log.read_text() == "run\n" * 3 and commands._STARTED == {}
    # slurmctld down: the started squeue waits (SQUEUE_WAIT), the ping says DOWN
    env(bin_dir, "Slurmctld(primary) at vm is DOWN", 1)
    script(
        bin_dir / "squeue",
        'sleep 30; echo "slurm_load_jobs error: Unable to contact slurm controller" >&2; exit 1',
    )
    commands.start(squeue_argv([], "user1"))
    t0 = time.monotonic()
    with pytest.raises(ControllerDown, match="scontrol ping says Slurmctld"):
        query_jobs(user="user1")
    assert time.monotonic() - t0 < CONTROLLER_PATIENCE + 5
