"""`submit`, `status` and `cancel` as a user drives them, against the fake Slurm commands."""

from __future__ import annotations

import getpass
import json
from pathlib import Path

import pytest
from cli_run import Ran, acbslurm
from click.testing import CliRunner
from fake_slurm import FakeSlurm

from acbslurm.cli import jobstatus as jobstatus_cli
from acbslurm.cli import waiting

T0 = "2026-11-30T01:00:00"
ME = getpass.getuser()


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    monkeypatch.setenv("ACBSLURM_RECORD_DIR", str(tmp_path / "records"))
    return tmp_path


def spec(cwd: Path, extra: str = "") -> str:
    path = cwd / "job.yaml"
    path.write_text(
        "name: t\npartition: p1\naccount: user1\noutput: out/%j.out\nerror: out/%j.err\n"
        "command: ['true']\n" + extra
    )
    return str(path)


def submit(*args: str) -> Ran:
    return acbslurm("submit", *args, "--acbslurm", "/x/acbslurm")


def test_submit_refuses_a_missing_output_directory(cwd: Path, fake_slurm: FakeSlurm) -> None:
    fake_slurm.set_cluster(accounts={"user1": [ME]})
    res = submit(spec(cwd))
    assert res.exit_code == 2
    err = res.stderr
    assert f"output directory '{cwd}/out' does not exist" in err
    assert "JobLaunchFailure" in err and "nothing was submitted" in err
    assert fake_slurm.calls("sbatch") == []
    (cwd / "out").mkdir()
    res = submit(spec(cwd))
    assert res.exit_code == 0, res.stderr
    assert len(fake_slurm.calls("sbatch")) == 1


def test_submit_refuses_an_unwritable_output_directory(
    cwd: Path, fake_slurm: FakeSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    fake_slurm.set_cluster(accounts={"user1": [ME]})
    (cwd / "out").mkdir()
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, m: False if str(p).endswith("out") else real(p, m))
    res = submit(spec(cwd))
    assert res.exit_code == 2
    assert "is not writable by" in res.stderr


def test_submit_refuses_an_unknown_partition_and_a_foreign_account(
    cwd: Path, fake_slurm: FakeSlurm
) -> None:
    (cwd / "out").mkdir()
    fake_slurm.set_cluster(partitions=["gpu"], accounts={"user1": ["user1"]})
    res = submit(spec(cwd))
    assert res.exit_code == 2
    err = res.stderr
    assert "partition 'p1' does not exist" in err
    assert f"account 'user1' does not exist or {ME} may not charge it" in err
    assert fake_slurm.calls("sbatch") == []
    # --no-check submits anyway (and sbatch would say what it thinks)
    assert submit(spec(cwd), "--no-check").exit_code == 0


def test_image_missing_in_the_users_daemon_is_a_warning_only(
    cwd: Path, fake_slurm: FakeSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    from acbslurm.dockerapi.engine import EngineApi, EngineError

    def inspect(self: EngineApi, ref: str) -> dict[str, str]:
        raise EngineError(404, f"No such image: {ref}")

    monkeypatch.setattr(EngineApi, "image_inspect", inspect)
    (cwd / "out").mkdir()
    fake_slurm.set_cluster(accounts={"user1": [ME]})
    path = cwd / "c.yaml"
    path.write_text(
        "partition: p1\noutput: out/x.out\ncontainer:\n  image: openai-whisper:latest\n"
        "  pull: never\n"
    )
    res = submit(str(path))
    assert res.exit_code == 0
    err = res.stderr
    assert "Warning: image 'openai-whisper:latest' is not in your Docker daemon here" in err
    assert "pull: never" in err


def failing_job(fake_slurm: FakeSlurm, cwd: Path) -> None:
    (cwd / "out").mkdir(exist_ok=True)
    fake_slurm.set_cluster(accounts={"user1": [ME]})
    err = cwd / "out" / "100.err"
    err.write_text("".join(f"line {i}\n" for i in range(30)) + "Error: image not found\n")
    run = {"state": "RUNNING", "node": "vm", "start": T0, "reason": "", "gpus": [0]}
    end = {"state": "FAILED", "end": T0, "exit_code": "3:0", "reason": "NonZeroExitCode"}
    # RUNNING twice: the fake's clock ticks after each squeue call, so scontrol, asked
    # next, sees the job still running (its GPUs) rather than already ended.
    fake_slurm.set_defaults(reason="Priority", std_err=str(err), next=[run, run, end])


def test_wait_explains_a_failure_with_reason_exit_code_and_error_tail(
    cwd: Path, fake_slurm: FakeSlurm
) -> None:
    failing_job(fake_slurm, cwd)
    res = submit(spec(cwd), "--wait", "--interval", "0.1")
    assert res.exit_code == 1
    err = res.stderr
    assert "100 PENDING (Priority)" in err  # piped: plain lines
    assert "job 100 FAILED, reason NonZeroExitCode, exit code 3" in err
    assert f"last lines of {cwd}/out/100.err:" in err
    assert "    Error: image not found" in err and "line 19" not in err  # 10 lines
    assert "1 of 1 jobs did not complete." in err


def test_wait_names_a_launch_failure_and_a_missing_error_file(
    cwd: Path, fake_slurm: FakeSlurm
) -> None:
    failing_job(fake_slurm, cwd)
    fake_slurm.set_defaults(
        std_err="/nonexistent/100.err",
        next=[{"state": "FAILED", "reason": "JobLaunchFailure", "exit_code": "1:0"}],
    )
    res = submit(spec(cwd), "--wait", "--interval", "0.1")
    assert res.exit_code == 1
    err = res.stderr
    assert "job 100 FAILED, reason JobLaunchFailure" in err
    assert "Slurm could not start the job" in err
    assert "error file /nonexistent/100.err: not readable here" in err


def test_wait_on_a_terminal_rewrites_one_summary_line(
    cwd: Path, fake_slurm: FakeSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing_job(fake_slurm, cwd)
    monkeypatch.setattr(waiting, "is_terminal", lambda: True)
    res = submit(spec(cwd), "-n", "2", "--wait", "--interval", "0.1")
    err = res.stderr
    assert "\r2 jobs: 2 PENDING (Priority)  (0:00)" in err  # why they wait, too
    assert "\r2 jobs: 2 RUNNING" in err
    assert "\r2 jobs: 2 FAILED  (" in err.split("\n")[0]  # one line, rewritten
    assert "100 PENDING (Priority)" not in err  # no per-job lines


def test_summary_counts_states_in_order() -> None:
    from acbslurm.slurm.jobtypes import JobInfo

    jobs = [JobInfo("1", "RUNNING"), JobInfo("2", "PENDING"), JobInfo("3", "RUNNING")]
    assert waiting.summary(jobs, 75) == "3 jobs: 1 PENDING, 2 RUNNING  (1:15)"
    assert waiting.clock(3725) == "1:02:05"


def test_summary_says_why_jobs_wait() -> None:
    from acbslurm.slurm.jobtypes import JobInfo

    held = [JobInfo("1", "PENDING", reason="JobHeldUser"), JobInfo("2", "RUNNING")]
    assert waiting.summary(held, 3) == "2 jobs: 1 PENDING (JobHeldUser), 1 RUNNING  (0:03)"
    mixed = [JobInfo(str(i), "PENDING", reason="Priority") for i in range(2)]
    mixed += [JobInfo("3", "PENDING", reason="JobHeldUser")]
    mixed += [JobInfo("4", "FAILED", reason="NonZeroExitCode")]  # an end, not a wait
    assert waiting.summary(mixed, 0) == (
        "4 jobs: 3 PENDING (2 Priority, 1 JobHeldUser), 1 FAILED  (0:00)"
    )


def test_wait_off_a_terminal_prints_a_line_when_the_reason_changes(
    cwd: Path, fake_slurm: FakeSlurm
) -> None:
    failing_job(fake_slurm, cwd)
    held = {"reason": "JobHeldUser"}
    run = {"state": "RUNNING", "node": "vm", "start": T0, "reason": "", "gpus": [0]}
    end = {"state": "COMPLETED", "end": T0, "exit_code": "0:0", "reason": ""}
    fake_slurm.set_defaults(reason="Priority", next=[held, held, run, run, end])
    res = submit(spec(cwd), "--wait", "--interval", "0.1")
    assert res.exit_code == 0, res.output
    lines = res.stderr.splitlines()
    assert lines[:3] == [
        "100 PENDING (Priority)",
        "100 PENDING (JobHeldUser)",
        "100 RUNNING on vm GPU 0",
    ]


def test_ctrl_c_says_the_jobs_keep_running_and_how_to_cancel(
    cwd: Path, fake_slurm: FakeSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    import acbslurm.slurm.watch as watch

    failing_job(fake_slurm, cwd)

    class Clock:
        monotonic = staticmethod(watch.time.monotonic)

        @staticmethod
        def sleep(_: float) -> None:  # the user presses Ctrl-C while --wait waits
            raise KeyboardInterrupt

    monkeypatch.setattr(watch, "time", Clock)
    res = submit(spec(cwd), "-n", "2", "--wait")
    assert res.exit_code == 130
    err = res.stderr
    assert "Stopped waiting. The jobs keep running: 100 101" in err
    assert "`acbslurm cancel 100 101`" in err
    assert "Traceback" not in err


def status(*args: str) -> object:
    return CliRunner().invoke(jobstatus_cli.status, list(args))


def test_status_has_user_partition_exit_and_compact_gpus(cwd: Path, fake_slurm: FakeSlurm) -> None:
    from acbslurm.gpuvalue import from_lists
    from acbslurm.jobrecord import JobRecord, write_record

    uuid = "GPU-0a1b2c3d-0000-1111-2222-333344445555"
    write_record(
        str(cwd / "records"), JobRecord("7", "user1", 1001, "vm", from_lists("vm", [1], [uuid], []))
    )
    fake_slurm.add_job("7", "RUNNING", node="vm", start=T0, gpus=[1], partition="gpu")
    fake_slurm.add_job(
        "8", "FAILED", user="user2", end=T0, exit_code="2:0", reason="NonZeroExitCode"
    )
    res = status("7", "8")
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0].split() == [
        "JOBID", "USER", "PARTITION", "STATE", "REASON", "EXIT", "ELAPSED", "NODE", "GPUS", "NAME"
    ]  # fmt: skip
    assert lines[1].split() == ["7", "user1", "gpu", "RUNNING", "-", "-", "0:00", "vm", "1", "job"]
    assert lines[2].split()[:6] == ["8", "user2", "p1", "FAILED", "NonZeroExitCode", "2"]
    long = status("-l", "7").stdout
    assert f"1={uuid}" in long
    data = json.loads(status("--json", "7", "8").stdout)
    one, two = data["jobs"]
    assert one["gpu_uuids"] == [uuid] and one["gpu_indices"] == [1]
    assert one["exit_code"] is None and one["reason"] is None and one["end"] is None
    assert one["start"].startswith("2026-11-30T") and one["start"][19] in "+-Z"
    assert (two["exit_code"], two["signal"], two["user"]) == (2, 0, "user2")
    assert data["unknown"] == []


def test_exit_code_of_an_ended_job_squeue_still_shows_comes_from_sacct(
    cwd: Path, fake_slurm: FakeSlurm
) -> None:
    fake_slurm.add_job("9", "COMPLETED", end=T0, exit_code="0:0")
    data = json.loads(status("--json", "9").stdout)
    assert data["jobs"][0]["exit_code"] == 0
    fake_slurm.forget("9")
    data = json.loads(status("--json", "9").stdout)
    assert data["jobs"][0]["exit_code"] == 0  # sacct answered alone


# sacct -n -P of three ended jobs and their steps, as Slurm 22.05 wrote them on the
# sandbox: 9 ran `srun acbslurm run` whose container was OOM-killed (the step says so,
# the job FAILED with srun's exit); 10 failed otherwise; 11's script went on after it.
STEPS_SACCT = """\
9|FAILED|00:00:03|vm|user1|t|t|t|1:0|p1|None|job
9.batch|FAILED|00:00:03|vm||t|t|t|1:0|||batch
9.0|OUT_OF_MEMORY|00:00:02|vm||t|t|t|0:125|||python3
10|FAILED|00:00:01|vm|user1|t|t|t|2:0|p1|None|job
10.0|FAILED|00:00:01|vm||t|t|t|2:0|||python3
11|COMPLETED|00:00:03|vm|user1|t|t|t|0:0|p1|None|job
11.0|OUT_OF_MEMORY|00:00:02|vm||t|t|t|0:125|||python3
"""


def test_a_job_whose_container_step_ran_out_of_memory_is_out_of_memory(
    cwd: Path, fake_slurm: FakeSlurm
) -> None:
    """The job FAILED (its script's exit), a step OUT_OF_MEMORY: status says
    OUT_OF_MEMORY, from the one sacct call it makes for the ended jobs anyway (the
    steps' rows come with the jobs'), whether squeue still shows them or not. A job
    that failed otherwise, or completed after a step's OOM, stays as it is."""
    for jid, state, code in (("9", "FAILED", "1:0"), ("10", "FAILED", "2:0")):
        fake_slurm.add_job(jid, state, node="vm", end=T0, exit_code=code)
    fake_slurm.add_job("11", "COMPLETED", node="vm", end=T0, exit_code="0:0")
    fake_slurm.respond("sacct", stdout=STEPS_SACCT)
    data = json.loads(status("--json", "9", "10", "11").stdout)
    got = [(j["job_id"], j["state"], j["exit_code"]) for j in data["jobs"]]
    assert got == [("9", "OUT_OF_MEMORY", 1), ("10", "FAILED", 2), ("11", "COMPLETED", 0)]
    (sacct,) = fake_slurm.calls("sacct")
    assert sacct.value("-j") == "9,10,11" and "-X" not in sacct.argv
    table = status("9").stdout.splitlines()
    assert table[1].split()[:6] == ["9", "user1", "p1", "OUT_OF_MEMORY", "-", "1"], table
    for jid in ("9", "10", "11"):
        fake_slurm.forget(jid)
    data = json.loads(status("--json", "9", "10", "11").stdout)
    assert [j["state"] for j in data["jobs"]] == ["OUT_OF_MEMORY", "FAILED", "COMPLETED"]


@pytest.mark.parametrize("as_json", [False, True])
def test_unknown_ids_exit_1_and_are_named_alike_by_status_and_cancel(
    cwd: Path, fake_slurm: FakeSlurm, as_json: bool
) -> None:
    fake_slurm.add_job("7", "RUNNING", node="vm", start=T0, gpus=[0])
    flags = ["--json"] if as_json else []
    for command in (jobstatus_cli.status, jobstatus_cli.cancel):
        res = CliRunner().invoke(command, [*flags, "7", "99999"])
        assert res.exit_code == 1, (command.name, res.output)
        assert res.stderr == "Error: no such job: 99999\n", command.name
        assert "Traceback" not in res.output
        if as_json:
            assert json.loads(res.stdout)["unknown"] == ["99999"]


def test_cancel_json(cwd: Path, fake_slurm: FakeSlurm) -> None:
    fake_slurm.add_job("7", "RUNNING", node="vm", start=T0, gpus=[0])
    fake_slurm.add_job("8", "COMPLETED", end=T0)
    res = CliRunner().invoke(jobstatus_cli.cancel, ["--json", "7", "8"])
    assert res.exit_code == 0
    assert json.loads(res.stdout) == {
        "cancelled": ["7"],
        "ended": [{"job_id": "8", "states": ["COMPLETED"]}],
        "unknown": [],
    }


def test_status_gpus_shows_each_gpu_with_its_job_or_free(cwd: Path, fake_slurm: FakeSlurm) -> None:
    fake_slurm.set_cluster(nodes={"node1": "gpu:2", "node2": "gpu:a100:1(S:0)"})
    fake_slurm.add_job("7", "RUNNING", node="node1", start=T0, gpus=[1], elapsed="1:05")
    fake_slurm.add_job("8", "PENDING", reason="Resources")
    res = status("--gpus")
    assert res.exit_code == 0, res.output
    rows = [line.split() for line in res.stdout.splitlines()]
    assert rows == [
        ["NODE", "GPU", "JOBID", "USER", "ELAPSED", "NAME"],
        ["node1", "0", "free", "-", "-"],
        ["node1", "1", "7", "user1", "1:05", "job"],
        ["node2", "0", "free", "-", "-"],
    ]
    data = json.loads(status("--gpus", "--json").stdout)
    assert data["gpus"][1] == {
        "node": "node1",
        "index": 1,
        "uuid": None,
        "job_id": "7",
        "user": "user1",
        "elapsed_s": 65,
        "name": "job",
        "unavailable": None,
        "node_reason": None,
    }
    assert data["gpus"][0]["job_id"] is None
    assert status("--gpus", "7").exit_code == 2


def test_status_gpus_shows_a_drained_nodes_gpus_as_unavailable(
    cwd: Path, fake_slurm: FakeSlurm
) -> None:
    # A node drained by a failed prolog starts no job: its idle GPUs are not free.
    fake_slurm.set_cluster(nodes={"node1": "gpu:2", "node2": "gpu:1"})
    fake_slurm.add_job("7", "RUNNING", node="node1", start=T0, gpus=[1], elapsed="1:05")
    fake_slurm.drain("node1", "Prolog error")
    res = status("--gpus")
    assert res.exit_code == 0, res.output
    rows = [line.split(None, 5) for line in res.stdout.splitlines()]
    assert rows[1:] == [
        ["node1", "0", "drained", "-", "-", "Prolog error [root@2026-11-30T01:00:00]"],
        ["node1", "1", "7", "user1", "1:05", "job"],  # a job on a draining node still runs
        ["node2", "0", "free", "-", "-"],
    ]
    gpus = json.loads(status("--gpus", "--json").stdout)["gpus"]
    assert gpus[0]["unavailable"] == "drained" and gpus[0]["job_id"] is None
    assert gpus[0]["node_reason"].startswith("Prolog error")
    assert gpus[2]["unavailable"] is None and gpus[2]["node_reason"] is None


def test_status_shows_where_my_running_jobs_publish_their_ports(
    cwd: Path, fake_slurm: FakeSlurm
) -> None:
    """What each `acbslurm run -p` of the job keeps in its working directory (a run on
    each of two nodes here), for the caller's running jobs only."""
    from acbslurm import jobfiles
    from acbslurm.container import ports

    mine, other = cwd / "mine", cwd / "other"
    mine.mkdir()
    other.mkdir()
    runs = ((mine, "7", "node1"), (mine, "7", "node2"), (other, "8", "node1"))
    for pid, (folder, jid, node) in enumerate(runs, start=100):
        entries = [{"port": "8888/tcp", "address": f"{node}:18888"}]
        data = {"job_id": jid, "node": node, "ports": entries}
        jobfiles.write_private(ports.ports_file(str(folder), jid, node, pid), data)
    fake_slurm.add_job("7", "RUNNING", user=ME, start=T0, workdir=str(mine))
    fake_slurm.add_job("8", "RUNNING", user="user2", start=T0, workdir=str(other))
    data = json.loads(acbslurm("status", "--json", "7", "8").stdout)
    published = {j["job_id"]: j["published"] for j in data["jobs"]}
    assert published == {
        "7": [
            {"node": "node1", "port": "8888/tcp", "address": "node1:18888"},
            {"node": "node2", "port": "8888/tcp", "address": "node2:18888"},
        ],
        "8": [],
    }
    text = acbslurm("status", "7").stdout
    assert "job 7 publishes 8888/tcp at node1:18888" in text
    assert "job 7 publishes 8888/tcp at node2:18888" in text


def test_status_shows_the_address_of_my_running_pool_job(cwd: Path, fake_slurm: FakeSlurm) -> None:
    """Only the caller's running jobs are looked at, in their working directory."""
    from acbslurm.serve.address import address_file, write_private

    mine, other = cwd / "mine", cwd / "other"
    mine.mkdir()
    other.mkdir()
    url = "http://node1:41327/v1"
    for folder, jid in ((mine, "7"), (other, "8"), (mine, "10")):
        write_private(address_file(str(folder), jid), {"url": url, "bound": "0.0.0.0:41327"})
    fake_slurm.add_job("7", "RUNNING", user=ME, start=T0, workdir=str(mine))
    fake_slurm.add_job("8", "RUNNING", user="user2", start=T0, workdir=str(other))
    fake_slurm.add_job("9", "RUNNING", user=ME, start=T0, workdir=str(other))  # no file
    fake_slurm.add_job("10", "COMPLETED", user=ME, end=T0, workdir=str(mine))  # ended
    fake_slurm.clear_calls()
    data = json.loads(acbslurm("status", "--json", "7", "8", "9", "10").stdout)
    serve = {j["job_id"]: j["serve"] for j in data["jobs"]}
    assert serve["7"] == {
        "url": url,
        "bound": "0.0.0.0:41327",
        "file": str(mine / "acbslurm-serve-7.json"),
    }
    assert serve["8"] is None and serve["9"] is None and serve["10"] is None
    # the working directories came with the jobs: one squeue (then sacct for 10's exit
    # code and scontrol for the GPUs of the running ones, which no prolog recorded)
    assert [a[0] for a in fake_slurm.argvs()].count("squeue") == 1
    text = acbslurm("status", "7").stdout
    assert f"job 7 serves {url} (bound 0.0.0.0:41327; {mine}/acbslurm-serve-7.json)" in text
    # a pool that asks for keys names its key file (the path, never a key)
    keys = str(mine / "acbslurm-serve-7.keys")
    data = {"url": url, "bound": "0.0.0.0:41327", "api_keys": keys}
    write_private(address_file(str(mine), "7"), data)
    text = acbslurm("status", "7").stdout
    assert f"(bound 0.0.0.0:41327; {mine}/acbslurm-serve-7.json; keys in {keys})" in text
    # nobody else's folder is looked into (8's has an address file)
    assert "serves" not in acbslurm("status", "8").stdout


def test_status_names_the_node_of_each_gpu_of_a_job_on_several_nodes() -> None:
    from acbslurm.cli.jobstatus import gpu_text as _gpu_text
    from acbslurm.gpuvalue import Gpu
    from acbslurm.slurm.jobtypes import JobInfo

    devices = [
        {"node": "vm-1", "index": 0, "uuid": "GPU-a"},
        {"node": "vm-1", "index": 1, "uuid": "GPU-b"},
        {"node": "vm-2", "index": 1, "uuid": None},
    ]
    gpus = [Gpu("GPU-a", 0, node="vm-1"), Gpu("GPU-b", 1, node="vm-1"), Gpu("", 1, node="vm-2")]
    job = JobInfo("7", "RUNNING", gpus=gpus)
    assert _gpu_text(job, long=False) == "vm-1:0,1 vm-2:1"
    assert _gpu_text(job, long=True) == "vm-1:0=GPU-a,1=GPU-b vm-2:1"
    assert job.as_json()["gpu_devices"] == devices
    assert job.as_json()["gpu_indices"] == [0, 1]
    one = JobInfo("8", "RUNNING", gpus=[Gpu("GPU-a", 0, node="vm-1"), Gpu("", 2, node="vm-1")])
    assert (_gpu_text(one, long=False), _gpu_text(one, long=True)) == ("0,2", "0=GPU-a,2")


def test_cancel_signal_sends_it_to_the_steps_and_keeps_the_job(
    cwd: Path, fake_slurm: FakeSlurm
) -> None:
    fake_slurm.add_job("7", "RUNNING", node="vm", start=T0, gpus=[0])
    fake_slurm.add_job("8", "COMPLETED", end=T0)
    res = CliRunner().invoke(jobstatus_cli.cancel, ["--signal", "sigusr1", "7", "8"])
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines() == ["Sent SIGUSR1 to 7", "Job 8 had already ended (COMPLETED)"]
    assert fake_slurm.argvs("scancel")[-1] == ["scancel", "--signal=USR1", "7"]
    res = CliRunner().invoke(jobstatus_cli.cancel, ["--json", "-s", "10", "--full", "7"])
    assert json.loads(res.stdout)["signalled"] == ["7"] and json.loads(res.stdout)["signal"] == "10"
    assert fake_slurm.argvs("scancel")[-1] == ["scancel", "--signal=10", "--full", "7"]
    assert "RUNNING" in status("7").stdout


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--signal", "HUPP", "7"], "'HUPP' is not a signal"),
        (["--signal", "99", "7"], "'99' is not a signal"),
        (["--full", "7"], "--full goes with --signal"),
    ],
)
def test_cancel_signal_bad_input_exits_2(
    cwd: Path, fake_slurm: FakeSlurm, args: list[str], says: str
) -> None:
    res = CliRunner().invoke(jobstatus_cli.cancel, args)
    assert res.exit_code == 2 and says in res.output, res.output
    assert fake_slurm.argvs("scancel") == []
