"""`acbslurm run` in a job whose record it cannot find says where it looked and why."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fake_docker import Answer, FakeDocker

from acbslurm.container import run_command
from acbslurm.errors import SetupError


def test_no_record_names_the_dir_and_the_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The prolog's wrapper named a settings file the job's environment did not: the
    # record exists elsewhere, and "the prolog is not configured" alone misleads.
    monkeypatch.delenv("ACBSLURM_CONFIG", raising=False)
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
    code = run_command.execute(run_command.RunArgs(image="img", command=("true",)))
    assert code == 0
    err = capfd.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("acbslurm: not inside a Slurm job (no SLURM_JOB_ID): the container ")
    assert "no GPUs and no CPU or memory limits" in err
    (create,) = fake_docker.calls("POST", "/containers/create")
    assert "DeviceRequests" not in create.body["HostConfig"]
