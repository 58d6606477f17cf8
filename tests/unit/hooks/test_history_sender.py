"""The sender of a job's record (hooks/usage.py) against fake Slurm commands: what it
writes (the SystemComment, never the AdminComment jobstats keeps), how it names an array
task, and what it keeps for later."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_slurm import FakeSlurm

from acbslurm.hooks.usage import PENDING, keep_history, send, send_pending

GPUS = "acbslurm:gpus=vm:0=GPU-aaaa"
SET = ["sacctmgr", "-i", "modify", "job", "where"]


def said(level: str, msg: str) -> None:
    print(f"{level}: {msg}")


@pytest.fixture
def slurm(fake_slurm: FakeSlurm) -> FakeSlurm:
    fake_slurm.respond("sacctmgr", stdout=" Modified jobs...\n")
    return fake_slurm


def test_the_words_go_into_the_system_comment_beside_others_by_the_tasks_name(
    slurm: FakeSlurm,
) -> None:
    # Task 3 of array 50 kept the array's id; a burst buffer's note is there already.
    slurm.respond("sacct", stdout="50|50_3|COMPLETED|t|10|cpu=1,gres/gpu=1|1|bb:ok\n")
    send("50", "vm", GPUS, None, 0, "", 0, said)
    assert slurm.argvs("sacctmgr") == [[*SET, "jobid=50_3", "set", f"SystemComment=bb:ok {GPUS}"]]
    assert "AdminComment" not in str(slurm.argvs())


def test_words_already_there_are_not_written_again_even_lowercased(
    slurm: FakeSlurm,
) -> None:
    slurm.respond("sacct", stdout=f"7|7|COMPLETED|t|10|a|1|{GPUS.lower()}\n")
    send("7", "vm", GPUS, None, 0, "", 0, said)
    assert slurm.argvs("sacctmgr") == []


def test_a_comment_with_quotes_is_not_rewritten(slurm: FakeSlurm) -> None:
    slurm.respond("sacct", stdout="7|7|COMPLETED|t|10|a|1|it's\n")
    with pytest.raises(ValueError, match="quotes"):
        send("7", "vm", GPUS, None, 0, "", 0, said)
    assert slurm.argvs("sacctmgr") == []


def test_kept_while_slurmdbd_is_away_then_sent(slurm: FakeSlurm, tmp_path: Path) -> None:
    assert keep_history("7", -1, "vm", str(tmp_path / "none"), str(tmp_path), GPUS, said)
    pending = tmp_path / PENDING / "7.vm.json"
    slurm.respond("sacct", stderr="sacct: error: slurmdbd: down\n", rc=1)
    send_pending(str(tmp_path), lambda: "", said)
    assert pending.exists() and slurm.argvs("sacctmgr") == []
    slurm.respond("sacct", stdout="7|7|COMPLETED|t|10|a|1|\n")
    send_pending(str(tmp_path), lambda: "", said)
    assert not pending.exists() and not list((tmp_path / PENDING).glob("*.failed"))
    assert slurm.argvs("sacctmgr") == [[*SET, "jobid=7", "set", f"SystemComment={GPUS}"]]


def test_a_job_without_gpus_or_a_pool_keeps_nothing(tmp_path: Path) -> None:
    assert not keep_history("8", 1000, "vm", str(tmp_path / "none"), str(tmp_path), "", said)
    assert not (tmp_path / PENDING).exists()
