"""The sender of a job's record (hooks/usage.py) against fake Slurm commands: what it
writes (the SystemComment, never the AdminComment jobstats keeps), how it names an array
task, and what it keeps for later."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_slurm import FakeSlurm
from processcoverage import UNMEASURED

from acbslurm.errors import SlurmError
from acbslurm.hooks import epilog
from acbslurm.hooks.usage import PENDING, keep_history, send, send_pending
from acbslurm.usagebook import Totals

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


def test_a_failing_sacctmgr_keeps_the_record_for_a_later_epilog(
    slurm: FakeSlurm, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # slurmdbd going away between sacct and sacctmgr, or the client gone for a moment
    # (an upgrade): the record is not put aside for good.
    assert keep_history("7", -1, "vm", str(tmp_path / "none"), str(tmp_path), GPUS, said)
    pending = tmp_path / PENDING / "7.vm.json"
    slurm.respond("sacct", stdout="7|7|COMPLETED|t|10|a|1|\n")
    slurm.respond("sacctmgr", stderr="sacctmgr: error: Problem talking to the database\n", rc=1)
    send_pending(str(tmp_path), lambda: "", said)
    assert pending.exists() and not list((tmp_path / PENDING).glob("*.failed"))
    assert "waits for a later epilog" in capsys.readouterr().out
    slurm.respond("sacctmgr", stdout=" Modified jobs...\n")
    send_pending(str(tmp_path), lambda: "", said)
    assert not pending.exists() and not list((tmp_path / PENDING).glob("*.failed"))


def test_a_missing_sacctmgr_keeps_every_record_and_stops_looking(
    slurm: FakeSlurm, tmp_path: Path
) -> None:
    # The client not there (an upgrade replacing it) or timed out: slurmdbd cannot be
    # asked now, so the other files are not tried either (each would wait as long).
    files = [_pending(tmp_path, str(j), age=60 - j) for j in (7, 8)]
    slurm.respond("sacct", stdout="7|7|COMPLETED|t|10|a|1|\n8|8|COMPLETED|t|10|a|1|\n")
    (slurm.bin_dir / "sacctmgr").unlink()
    send_pending(str(tmp_path), lambda: str(slurm.bin_dir), said)
    assert all(p.exists() for p in files) and not list((tmp_path / PENDING).glob("*.failed"))
    assert len(slurm.argvs("sacct")) == 1


def test_a_job_without_gpus_or_a_pool_keeps_nothing(tmp_path: Path) -> None:
    assert not keep_history("8", 1000, "vm", str(tmp_path / "none"), str(tmp_path), "", said)
    assert not (tmp_path / PENDING).exists()


def _pending(tmp_path: Path, job: str, *, age: float = 0.0, pool: bool = False) -> Path:
    """A kept file of ``job`` (a pool's when ``pool``: it waits for the job's end),
    written ``age`` seconds ago."""
    folder = tmp_path / PENDING
    folder.mkdir(exist_ok=True)
    path = folder / f"{job}.vm.json"
    totals = Totals().as_dict() if pool else None
    data = {"job_id": job, "node": "vm", "gpus": GPUS, "lost": 0, "totals": totals}
    data["kept"] = time.time() - age
    path.write_text(json.dumps(data))
    os.utime(path, (time.time() - age, time.time() - age))
    return path


def test_jobs_not_ended_yet_take_no_one_elses_turn(slurm: FakeSlurm, tmp_path: Path) -> None:
    # A user's requeue-held jobs (sacct shows no end): older than everyone else's.
    held = [_pending(tmp_path, str(100 + i), age=3600 - i, pool=True) for i in range(8)]
    others = [_pending(tmp_path, str(j), age=60) for j in (7, 8, 9)]
    own = _pending(tmp_path, "10")
    ended = "".join(f"{j}|{j}|COMPLETED|t|10|a|1|\n" for j in (7, 8, 9, 10))
    slurm.respond("sacct", stdout=ended + "100|100|PENDING|Unknown|0|a|1|\n")
    send_pending(str(tmp_path), lambda: "", said, first=own.name)
    assert all(p.exists() for p in held) and not any(p.exists() for p in [*others, own])
    asked = [a[a.index("-j") + 1] for a in slurm.argvs("sacct")]
    assert asked[0] == "10"  # this epilog's own first
    assert sorted(asked[1:]) == sorted(["7", "8", "9", *(p.name.split(".")[0] for p in held)])
    # waited on: to the back of the line, so the next sender starts with the others'
    assert min(p.stat().st_mtime for p in held) > time.time() - 60


def test_a_job_never_ended_after_a_week_is_put_aside(
    slurm: FakeSlurm, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = _pending(tmp_path, "100", age=8 * 86400, pool=True)
    slurm.respond("sacct", stdout="")
    send_pending(str(tmp_path), lambda: "", said)
    assert not old.exists() and Path(f"{old}.failed").exists()
    assert "not recorded in slurmdbd yet after 7 days" in capsys.readouterr().out


def test_a_refused_usage_word_leaves_the_gpus_word_written(
    slurm: FakeSlurm, tmp_path: Path
) -> None:
    t = Totals()
    t.add_request("alice", "m", 1, 1)
    t.add_lease("m", 5.0, {"alice": 5.0})
    slurm.respond("sacct", stdout="7|7|COMPLETED|t|10|gres/gpu=1|1|\n")
    # The fake refuses both: the second write is the GPUs' word alone, tried once.
    slurm.respond("sacctmgr", stderr="sacctmgr: error: too long\n", rc=1)
    with pytest.raises(SlurmError):
        send("7", "vm", GPUS, t, 0, "", 0, said)
    first, second = slurm.argvs("sacctmgr")
    assert "acbslurm:usage=vm" in first[-1]
    assert second == [*SET, "jobid=7", "set", f"SystemComment={GPUS}"]


def test_the_kept_file_is_made_anew_private_never_through_a_link(tmp_path: Path) -> None:
    folder = tmp_path / PENDING
    folder.mkdir()
    target = tmp_path / "victim"
    target.write_text("keep me")
    (folder / f".7.vm.json.{os.getpid()}.tmp").symlink_to(target)
    old = os.umask(0)
    try:
        assert keep_history("7", -1, "vm", str(tmp_path / "none"), str(tmp_path), GPUS, said)
    finally:
        os.umask(old)
    kept = folder / "7.vm.json"
    assert stat.S_IMODE(kept.lstat().st_mode) == 0o600 and not kept.is_symlink()
    assert target.read_text() == "keep me"


HOSTILE = "import pathlib; pathlib.Path({marker!r}).write_text('root ran me')\n"


def test_the_sender_never_imports_from_its_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # slurmd's cwd may be /var/tmp: anyone may leave a json.py there for root to import.
    hostile, marker = tmp_path / "hostile", tmp_path / "marker"
    hostile.mkdir()
    (hostile / "json.py").write_text(HOSTILE.format(marker=str(marker)))
    (tmp_path / "jobs").mkdir()
    bad = _pending(tmp_path / "jobs", "7")
    bad.write_text("{")  # not JSON: put aside, which shows the sender ran and read it
    (tmp_path / "acbslurm.yaml").write_text(f"record_dir: {tmp_path}/jobs\n")
    env = {"ACBSLURM_CONFIG": str(tmp_path / "acbslurm.yaml"), "PYTHONPATH": str(hostile)}
    # The way the sender started before (-sE, no chdir) imports it: the file is hostile.
    # Unmeasured: coverage's start-up (make test) would import the real json first.
    control = subprocess.run(
        [sys.executable, "-sE", "-c", "import json"],
        cwd=hostile,
        env={**os.environ, **UNMEASURED},
        check=True,
    )
    assert control.returncode == 0 and marker.exists()
    marker.unlink()
    monkeypatch.chdir(hostile)
    pid = epilog._start_sender(env)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    assert Path(f"{bad}.failed").exists() and not marker.exists()


def test_the_sender_starts_isolated(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []
    monkeypatch.setattr(os, "posix_spawn", lambda _exe, argv, *_a, **_k: seen.append(argv) or 1)
    epilog._start_sender({}, "7.vm.json")
    ((_, flag, c, code),) = seen
    assert (flag, c) == ("-I", "-c") and code.startswith("import os, sys; os.chdir('/');")
