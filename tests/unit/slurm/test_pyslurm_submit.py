"""The pyslurm backend's results and errors, with a stand-in pyslurm module."""

import sys
import types
from typing import Any

import pytest

from acbslurm.errors import SlurmError
from acbslurm.slurm import jobs, pyslurm_backend

SCRIPT = "#!/bin/bash\n#SBATCH --job-name=x\n#SBATCH --partition=p1\nsleep 1\n"


class RPCError(Exception):
    pass


@pytest.fixture
def fake_pyslurm(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    state: dict[str, Any] = {"next": 100, "fail_after": None, "descs": [], "cancelled": []}

    class JobSubmitDescription:
        def __init__(self, **attrs: Any) -> None:
            self.attrs = attrs
            state["descs"].append(attrs)

        def submit(self) -> int:
            if state["fail_after"] is not None and state["next"] >= state["fail_after"]:
                raise RPCError("Invalid partition name specified")
            state["next"] += 1
            return int(state["next"] - 1)

    class Job:
        def __init__(self, job_id: int) -> None:
            self.job_id = job_id

        def cancel(self) -> None:
            if self.job_id == 999:
                raise RPCError("Invalid job id specified")
            state["cancelled"].append(self.job_id)

    mod = types.ModuleType("pyslurm")
    mod.RPCError = RPCError  # type: ignore[attr-defined]
    mod.JobSubmitDescription = JobSubmitDescription  # type: ignore[attr-defined]
    mod.Job = Job  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pyslurm", mod)
    return state


def test_ids_in_order_with_the_scripts_options(fake_pyslurm: dict[str, Any]) -> None:
    res = jobs.submit_script(SCRIPT, count=3, backend="pyslurm", cwd="/tmp")
    assert res.job_ids == ["100", "101", "102"] and res.error is None
    attrs = fake_pyslurm["descs"][0]
    assert attrs["name"] == "x" and attrs["partitions"] == "p1"
    assert attrs["working_directory"] == "/tmp" and attrs["script"] == SCRIPT
    assert attrs["environment"]["SLURM_SUBMIT_DIR"] == "/tmp"


def test_a_failure_stops_and_reads_like_sbatchs(fake_pyslurm: dict[str, Any]) -> None:
    fake_pyslurm["fail_after"] = 102
    res = jobs.submit_script(SCRIPT, count=5, backend="pyslurm")
    assert res.job_ids == ["100", "101"] and res.partial
    assert (res.failed, res.not_attempted) == (1, 2)
    assert isinstance(res.error, SlurmError) and res.error.returncode == 1
    assert "Batch job submission failed: Invalid partition name specified" in str(res.error)


def test_pyslurm_submits_only_as_this_process(fake_pyslurm: dict[str, Any]) -> None:
    from acbslurm.errors import ConfigError

    with pytest.raises(ConfigError, match="this process's user"):
        jobs.submit_script(SCRIPT, backend="pyslurm", user="user1")


def test_cancel(fake_pyslurm: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    scancel: list[list[str]] = []
    monkeypatch.setattr(jobs, "slurm", lambda argv, **kw: scancel.append(list(argv)))
    jobs.cancel_jobs(["5", "6_1"], backend="pyslurm")
    assert fake_pyslurm["cancelled"] == [5]
    assert scancel == [["scancel", "6_1"]]  # pyslurm's Job takes no task ids
    with pytest.raises(SlurmError, match="Invalid job id specified"):
        pyslurm_backend.cancel_jobs(["999"])
