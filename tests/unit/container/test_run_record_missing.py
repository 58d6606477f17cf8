"""`acbslurm run` in a job whose record it cannot find says where it looked and why."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fake_docker import Answer, FakeDocker

from acbslurm.container import run_command
from acbslurm.container.options import RunArgs
from acbslurm.errors import SetupError


def test_no_record_names_the_dir_and_the_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The prolog's wrapper named a settings file the job's environment did not: the
    # record exists elsewhere, and "the prolog is not configured" alone misleads.
    monkeypatch.delenv("ACBSLURM_CONFIG", raising=False)
    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    monkeypatch.setattr(run_command, "DEFAULT_CONFIG_FILE", str(tmp_path / "none.yaml"))
    with pytest.raises(SetupError) as exc:
        run_command._job_record(str(tmp_path / "jobs"), "42", "auto")
    text = str(exc.value)
    assert f"job 42 in {tmp_path / 'jobs'}" in text
    assert f"the defaults (no {tmp_path / 'none.yaml'}, no ACBSLURM_CONFIG)" in text
    monkeypatch.setenv("ACBSLURM_CONFIG", "/site/acbslurm.json")
    with pytest.raises(SetupError, match=re.escape("ACBSLURM_CONFIG=/site/acbslurm.json gave")):
        run_command._job_record(str(tmp_path / "jobs"), "42", "auto")
    assert run_command._job_record(str(tmp_path / "jobs"), "42", "none") is None


def test_a_requeued_runs_missing_record_names_the_skipped_prolog(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rerun started before the first run's credential expired gets no prolog from
    slurmd (seen on 22.05): the message names that, not the configuration, which the
    first run proved right."""
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    with pytest.raises(SetupError) as exc:
        run_command._job_record(str(tmp_path / "jobs"), "42", "auto")
    text = str(exc.value)
    assert "this is run 1 of a requeued job: Slurm ran no prolog for it" in text, text
    assert "reissued job credential" in text and "scontrol requeue 42" in text, text
    assert "prolog is not configured" not in text, text
    assert run_command._job_record(str(tmp_path / "jobs"), "42", "none") is None


def test_outside_a_job_it_says_so_in_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    fake_docker: FakeDocker,
) -> None:
    fake_docker.on("GET", "/images/*", Answer(200, {"Id": "sha256:1"}))  # the image is there
    (tmp_path / "none.yaml").write_text("{}\n")
    monkeypatch.setenv("ACBSLURM_CONFIG", str(tmp_path / "none.yaml"))
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setenv("DOCKER_HOST", fake_docker.host)
    code = run_command.execute(RunArgs(image="img", command=("true",)))
    assert code == 0
    err = capfd.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("acbslurm: not inside a Slurm job (no SLURM_JOB_ID): the container ")
    assert "no GPUs and no CPU or memory limits" in err
    (create,) = fake_docker.calls("POST", "/containers/create")
    assert "DeviceRequests" not in create.body["HostConfig"]


def test_the_probe_started_before_the_imports_is_the_runs_only_info(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_docker: FakeDocker
) -> None:
    """cli/entry.py starts /info from DOCKER_HOST before the run's modules load; the run
    uses that probe and its client (one /info, versions learnt once), and asks again
    only where the settings chose another daemon."""
    from acbslurm.container.probe import probe_from_env

    fake_docker.on("GET", "/images/*", Answer(200, {"Id": "sha256:1"}))
    (tmp_path / "none.yaml").write_text("{}\n")
    monkeypatch.setenv("ACBSLURM_CONFIG", str(tmp_path / "none.yaml"))
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setenv("DOCKER_HOST", fake_docker.host)
    early = probe_from_env({"DOCKER_HOST": fake_docker.host})
    assert early is not None and early.api.host == fake_docker.host
    args = RunArgs(image="img", command=("true",))
    assert run_command.execute(args, early) == 0
    early.thread.join(5)  # its /info may still be on the way when a run without GPUs ends
    assert len(fake_docker.calls("GET", "/info")) == 1
    # a probe of another daemon is not this run's: it asks its own daemon
    other = probe_from_env({"DOCKER_HOST": f"unix://{tmp_path}/other.sock"})
    assert other is not None
    assert run_command.execute(args, other) == 0
    other.thread.join(5)
    with fake_docker.cond:
        fake_docker.cond.wait_for(lambda: len(fake_docker.calls("GET", "/info")) >= 2, 5)
    assert len(fake_docker.calls("GET", "/info")) == 2
    # where only the settings name the daemon, or an address acbslurm does not speak
    assert probe_from_env({}) is None
    assert probe_from_env({"DOCKER_HOST": "tcp://10.0.0.1:2375"}) is None
