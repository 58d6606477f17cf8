"""sbatch runs with the environment it is given: the job inherits it (--export=ALL)."""

from __future__ import annotations

import os

import pytest
from fake_slurm import FakeSlurm

from acbslurm.slurm.jobs import submit_script

SCRIPT = "#!/bin/sh\n#SBATCH --gpus=1\nsleep 1\n"


def user_env() -> dict[str, str]:
    # The demo's user environment, as root would build it for the user it submits as.
    return {
        "PATH": os.environ["PATH"],  # the fake sbatch is first on it
        "HOME": "/home/user1",
        "USER": "user1",
        "XDG_RUNTIME_DIR": "/run/user/1001",
        "PYTHONPATH": "/src/acbslurm",
    }


@pytest.mark.parametrize("count", [1, 3])
def test_sbatch_gets_the_given_environment_not_ours(
    count: int, fake_slurm: FakeSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", "/root")
    monkeypatch.setenv("ONLY_IN_ROOTS_ENV", "1")
    res = submit_script(SCRIPT, count=count, env=user_env(), extra_env={"ACB_EXTRA": "x"})
    assert res.error is None and len(res.job_ids) == count
    calls = fake_slurm.calls("sbatch")
    assert len(calls) == count
    for call in calls:
        assert call.stdin == SCRIPT
        env = call.env
        assert env["HOME"] == "/home/user1"
        assert env["XDG_RUNTIME_DIR"] == "/run/user/1001"
        assert env["PYTHONPATH"] == "/src/acbslurm"
        assert env["ACB_EXTRA"] == "x"  # extra_env still goes on top
        assert "ONLY_IN_ROOTS_ENV" not in env  # replaced, not merged into ours


def test_without_env_sbatch_inherits_ours(
    fake_slurm: FakeSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACB_MARK", "ours")
    res = submit_script(SCRIPT)
    assert res.job_ids == ["100"]
    (call,) = fake_slurm.calls("sbatch")
    assert call.env["ACB_MARK"] == "ours" and call.argv == ["--parsable"]
