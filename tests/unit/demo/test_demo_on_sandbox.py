"""The demo's orchestration on a stand-in sandbox: environments, order, what is told."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from acbslurm.demo import on_sandbox as run_mod
from acbslurm.demo.experiment import JobTrace, Phase
from acbslurm.demo.on_sandbox import (
    EXAMPLE,
    DemoOptions,
    hold_pattern,
    job_script,
    run_demo,
    run_experiment,
)
from acbslurm.demo.show import SEED_OK, USAGE_TITLE
from acbslurm.demo.target import Target
from acbslurm.errors import SetupError

SLURM_ENV = {"PATH": "/usr/bin", "SLURM_CONF": "/sb/slurm.conf", "HOME": "/root"}
JOB_ENV = {"PATH": "/usr/bin", "SLURM_CONF": "/sb/slurm.conf", "HOME": "/home/user1"}
TARGET = Target(
    root="/sb",
    user="user1",
    uid=1001,
    inventory={0: "GPU-a", 1: "GPU-b"},
    record_dir="/run/rec",
    slurm_env=SLURM_ENV,
    job_env=JOB_ENV,
    home="/home/user1",
    acbslurm_cmd=("py", "-m", "acbslurm"),
)


def test_hold_pattern_frees_one_gpu_early_in_the_four_job_phase() -> None:
    assert hold_pattern(1, 6) == [6]
    assert hold_pattern(2, 6) == [6, 6]
    assert hold_pattern(4, 6) == [6, 12, 6, 6]


def test_job_script_holds_the_gpu_in_the_container_or_with_sleep() -> None:
    cmd = ("py", "-m", "acbslurm")
    boxed = job_script(EXAMPLE, account="user9", acbslurm_cmd=cmd, seconds=2.5, container=True)
    assert "--account=user9" in boxed and "HOLD_SECONDS=2.5" in boxed
    plain = job_script(EXAMPLE, account="user9", acbslurm_cmd=cmd, seconds=12, container=False)
    assert "exec sleep 12" in plain and "HOLD_SECONDS" not in plain


class _Slurm:
    """Records every call the orchestration makes, with the environment it passed."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        self.calls: list[tuple[str, Any]] = []

    def cancel_and_wait(self, *, env: Any, timeout: float) -> None:
        self.calls.append(("cancel_and_wait", env))

    def run_phase(self, scripts: list[tuple[str, float]], **kw: Any) -> Phase:
        self.calls.append(("run_phase", (kw["env"], kw["slurm_env"], kw["user"], kw["cwd"])))
        jobs = [JobTrace(str(100 + i), hold) for i, (_, hold) in enumerate(scripts)]
        return Phase(len(scripts), jobs, list(self.problems))

    def wait_until_stored(self, ids: list[str], *, env: Any) -> bool:
        self.calls.append(("wait_until_stored", env))
        return True

    def usage_report(self, cmd: Any, user: str, since: int, *, env: Any) -> str:
        self.calls.append(("usage_report", env))
        return "USAGE"


@pytest.fixture
def slurm(monkeypatch: pytest.MonkeyPatch) -> Any:
    def install(problems: list[str]) -> _Slurm:
        fake = _Slurm(problems)
        for name in ("cancel_and_wait", "run_phase", "wait_until_stored", "usage_report"):
            monkeypatch.setattr(run_mod, name, getattr(fake, name))
        return fake

    return install


def test_told_run_passes_the_sandbox_env_everywhere_and_ends_with_the_usage(
    slurm: Any,
) -> None:
    fake = slurm([])
    environ = dict(os.environ)
    told: list[str] = []
    result = run_experiment(TARGET, EXAMPLE, DemoOptions(hold=3), told.append)
    assert dict(os.environ) == environ  # nothing reaches Slurm through our own environ
    assert result.ok and [p.count for p in result.phases] == [1, 2, 4]
    phase_call = ("run_phase", (JOB_ENV, SLURM_ENV, 1001, "/home/user1"))
    assert fake.calls == [
        ("cancel_and_wait", SLURM_ENV),
        phase_call,
        phase_call,
        phase_call,
        ("wait_until_stored", SLURM_ENV),
        ("usage_report", SLURM_ENV),
    ]
    assert told[0].startswith("Sandbox /sb: 2 GPUs, jobs run as user1")
    assert told[-3:] == [SEED_OK, USAGE_TITLE, "USAGE"]


def test_quiet_run_tells_nothing_and_skips_the_usage(slurm: Any) -> None:
    fake = slurm([])
    result = run_experiment(TARGET, EXAMPLE, DemoOptions(), None)
    assert result.ok
    assert [c for c, _ in fake.calls] == ["cancel_and_wait", *["run_phase"] * 3]


def test_a_failed_run_skips_the_usage(slurm: Any) -> None:
    fake = slurm(["job 100 ended FAILED, not COMPLETED"])
    told: list[str] = []
    result = run_experiment(TARGET, EXAMPLE, DemoOptions(), told.append)
    assert not result.ok
    assert "usage_report" not in [c for c, _ in fake.calls]
    assert SEED_OK not in told


def test_missing_spec_is_a_setup_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(run_mod, "sandbox_target", lambda d: TARGET)
    with pytest.raises(SetupError, match="pass --spec"):
        run_demo(DemoOptions(spec=str(tmp_path / "none.yaml")))
