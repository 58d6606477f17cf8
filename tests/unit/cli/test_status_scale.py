"""`acbslurm status` asks Slurm the same few questions for 40 jobs as for 400.

A busy cluster's queue holds thousands of jobs: a command whose Slurm calls (each a
fork, a munge credential and a request to slurmctld) or file opens grow with the
jobs it shows gets slower with every job (issue 30: 1.7 ms per running job). This
counts the calls against the fake Slurm commands; bench/status_bench.py measures the
time on the sandbox.
"""

from __future__ import annotations

import getpass
import json
from collections import Counter
from pathlib import Path

import pytest
from cli_run import acbslurm
from fake_slurm import FakeSlurm

T0 = "2026-11-30T01:00:00"
ME = getpass.getuser()


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ACBSLURM_RECORD_DIR", str(tmp_path / "records"))
    monkeypatch.setenv("ACBSLURM_SLURM_BACKEND", "cli")
    return tmp_path


def uuid_of(index: int) -> str:
    return f"GPU-00000000-0000-0000-0000-{index:012d}"


def queue(fake: FakeSlurm, workdir: Path, n: int, recorded: bool = False) -> list[str]:
    """``n`` of the caller's jobs, half running (each on a GPU), half held; their ids.
    ``recorded``: the running jobs' prologs wrote their GPUs into the AdminComment."""
    ids = [str(1000 + i) for i in range(n)]
    for i, jid in enumerate(ids):
        if i % 2:
            fake.add_job(jid, "PENDING", user=ME, reason="JobHeldUser", workdir=str(workdir))
            continue
        comment = f"acbslurm:gpus=vm:{i % 8}={uuid_of(i % 8)}" if recorded else ""
        fake.add_job(
            jid,
            "RUNNING",
            user=ME,
            node="vm",
            start=T0,
            gpus=[i % 8],
            workdir=str(workdir),
            admin_comment=comment,
        )
    return ids


def calls_of(fake: FakeSlurm, *args: str) -> Counter[str]:
    fake.clear_calls()
    res = acbslurm("status", "--json", *args)
    assert res.exit_code == 0, res.output
    assert all(j["gpu_indices"] for j in json.loads(res.stdout)["jobs"] if j["state"] == "RUNNING")
    return Counter(c.cmd for c in fake.calls())


@pytest.mark.parametrize("by_id", [False, True], ids=["all", "by-id"])
def test_status_asks_slurm_as_often_for_400_jobs_as_for_40(
    cwd: Path, fake_slurm: FakeSlurm, by_id: bool
) -> None:
    seen = []
    for n in (40, 400):
        ids = queue(fake_slurm, cwd, n)
        seen.append(calls_of(fake_slurm, *(ids if by_id else ())))
    # squeue (the jobs with their working directories), one scontrol listing for the
    # GPUs of every running job (no prolog recorded them), no sacct: none of them ended.
    assert seen[0] == seen[1] == Counter({"squeue": 1, "scontrol": 1})


@pytest.mark.parametrize("by_id", [False, True], ids=["all", "by-id"])
def test_gpus_the_prologs_recorded_come_with_the_one_squeue(
    cwd: Path, fake_slurm: FakeSlurm, by_id: bool
) -> None:
    """The GPUs each running job's prolog wrote into its AdminComment come in squeue's
    answer: one request, however many jobs run (issue 30: with 128 running the scontrol
    listing of the whole table cost 0.4-0.5 s)."""
    ids = queue(fake_slurm, cwd, 400, recorded=True)
    assert calls_of(fake_slurm, *(ids if by_id else ())) == Counter({"squeue": 1})
    res = acbslurm("status", "--json", "-l", *(ids if by_id else ()))
    jobs = {j["job_id"]: j for j in json.loads(res.stdout)["jobs"]}
    assert [jobs[ids[i]]["gpu_uuids"] for i in (0, 2, 10)] == [[uuid_of(i % 8)] for i in (0, 2, 10)]
    assert [jobs[ids[i]]["gpu_indices"] for i in (0, 2, 10)] == [[0], [2], [2]]
    assert jobs[ids[1]]["gpu_indices"] == [] and jobs[ids[1]]["state"] == "PENDING"


def test_a_few_running_jobs_by_id_are_still_asked_one_by_one(
    cwd: Path, fake_slurm: FakeSlurm
) -> None:
    """A watcher of a few jobs never has the controller list its whole queue."""
    ids = queue(fake_slurm, cwd, 6)
    calls = calls_of(fake_slurm, *ids)
    assert calls == Counter({"squeue": 1, "scontrol": 3})
    assert all(len(argv) == 6 for argv in fake_slurm.argvs("scontrol"))  # ... show job ID


def test_records_and_address_files_are_listed_once_not_opened_per_job(
    cwd: Path, fake_slurm: FakeSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    from acbslurm.gpuvalue import from_lists
    from acbslurm.jobrecord import JobRecord, write_record
    from acbslurm.serve.address import address_file, write_private

    uuid = "GPU-0a1b2c3d-0000-1111-2222-333344445555"
    ids = queue(fake_slurm, cwd, 40)
    write_record(
        str(cwd / "records"), JobRecord(ids[2], ME, 1001, "vm", from_lists("vm", [2], [uuid], []))
    )
    url = "http://vm:41327/v1"
    write_private(address_file(str(cwd), ids[4]), {"url": url, "bound": "0.0.0.0:41327"})
    opened: list[str] = []
    real_open = open

    def counting_open(path: object, *args: object, **kwargs: object) -> object:
        opened.append(str(path))
        return real_open(path, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr("builtins.open", counting_open)
    import acbslurm.serve.address as address

    real_os_open = address.os.open
    monkeypatch.setattr(
        address.os, "open", lambda p, *a: opened.append(str(p)) or real_os_open(p, *a)
    )
    res = acbslurm("status", "--json")
    monkeypatch.undo()
    assert res.exit_code == 0, res.output
    jobs = {j["job_id"]: j for j in json.loads(res.stdout)["jobs"]}
    assert jobs[ids[2]]["gpu_uuids"] == [uuid]
    assert jobs[ids[4]]["serve"]["url"] == url
    assert [p for p in opened if p.endswith(".json") and str(cwd) in p] == [
        str(cwd / "records" / f"{ids[2]}.json"),
        address_file(str(cwd), ids[4]),
    ]
