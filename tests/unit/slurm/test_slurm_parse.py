"""Parsing of Slurm's CLI output (pure logic)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_slurm import FakeSlurm

from acbslurm.gpuvalue import Gpu
from acbslurm.slurm.jobparse import (
    SQUEUE_FORMAT,
    parse_gpu_indices,
    parse_job_gpus,
    parse_job_id,
    parse_sacct,
    parse_squeue,
    parse_squeue_gpus,
)
from acbslurm.slurm.jobs import query_jobs
from acbslurm.slurm.jobtypes import JobInfo
from acbslurm.units import expand_ranges


def squeue_row(
    jid: str, state: str, node: str, comment: str = "(null)", name: str = "job", **kw: str
) -> str:
    """One line as ``squeue -h -O jobparse.SQUEUE_FORMAT`` prints it (Slurm 22.05 to 25.11)."""
    fields = [
        jid,
        kw.get("own_id", jid),
        state,
        kw.get("reason", "None"),
        "0:05",
        node,
        "user1",
        "2026-11-30T01:00:00",
        kw.get("start", "2026-11-30T01:00:01"),
        "2026-11-30T02:00:01",
        kw.get("partition", "p1"),
    ]
    return "|".join(fields) + f"|{comment}\x1f{kw.get('work_dir', '/home/user1')}\x1f{name}\n"


def test_parse_squeue_keeps_name_with_pipes() -> None:
    out = squeue_row("7", "RUNNING", "vm", name="a|b") + squeue_row(
        "8", "PENDING", "(null)", reason="Resources", start="N/A", partition="p2", name="x"
    )
    jobs = parse_squeue(out)
    assert jobs[0].name == "a|b" and jobs[0].node == "vm" and jobs[0].reason == ""
    assert jobs[0].end_time == ""  # a running job's end is only a limit
    assert jobs[1].reason == "Resources" and jobs[1].node == "" and jobs[1].start_time == ""
    assert (jobs[0].partition, jobs[1].partition) == ("p1", "p2")
    assert jobs[0].work_dir == "/home/user1"


def test_the_gpus_a_running_jobs_prologs_recorded_come_with_its_row() -> None:
    """squeue's AdminComment gives a running job's GPUs (no scontrol); only when every
    node's prolog wrote its token, with Slurm's indices, and the prolog is over."""
    a, b = "GPU-aaaa", "GPU-bbbb"
    two = f"acbslurm:gpus=vm-2:1={b},vm-1:0={a}"
    rows, gpus = parse_squeue_gpus(
        squeue_row("7", "RUNNING", "vm", f"acbslurm:gpus=vm:1={a}", own_id="9")
        # an admin's comment may hold '|'; a directory or a name (the user's) with
        # separators never reaches the comment
        + squeue_row("8", "RUNNING", "vm-[1-2]", f"x|y {two}", name=f"n\x1facbslurm:gpus=vm:3={b}")
        + squeue_row("10", "RUNNING", "vm-[1-2]", f"acbslurm:gpus=vm-1:0={a}")  # vm-2's not yet
        + squeue_row("11", "CONFIGURING", "vm", f"acbslurm:gpus=vm:0={a}", reason="Prolog")
        + squeue_row("12", "RUNNING", "vm", f"acbslurm:gpus=vm:-={a}")  # no index
        + squeue_row("13", "RUNNING", "vm", f"acbslurm:gpus=vm-9:0={a}")  # another node's
        + squeue_row("14", "COMPLETING", "vm", f"acbslurm:gpus=vm:0={a}")  # asked: released?
        + squeue_row("15", "RUNNING", "vm", "(null)", work_dir=f"/d\x1facbslurm:gpus=vm:0={a}")
        + squeue_row("16", "PENDING", "", f"acbslurm:gpus=vm:0={a}", start="N/A")
    )
    assert [r.job_id for r in rows] == [str(i) for i in (7, 8, 10, 11, 12, 13, 14, 15, 16)]
    assert sorted(gpus) == ["7", "8"]
    assert gpus["7"].job_id == "9" and gpus["7"].gpus == [Gpu(a, 1, node="vm")]
    assert gpus["8"].gpus == [Gpu(a, 0, node="vm-1"), Gpu(b, 1, node="vm-2")]
    assert rows[1].name == f"n\x1facbslurm:gpus=vm:3={b}"
    assert rows[7].work_dir == "/d" and "acbslurm" in rows[7].name


def test_parse_sacct_state_words() -> None:
    jobs = parse_sacct("9|CANCELLED by 0|00:00:03|vm|user1|t1|t2|t3|0:15|p1|None|job\n")
    assert jobs[0].state == "CANCELLED" and jobs[0].failed and jobs[0].exit_code == "0:15"
    assert jobs[0].partition == "p1" and jobs[0].reason == ""
    failed = parse_sacct("10|FAILED|0:00|vm|u|t|t|t|1:0|p1|JobLaunchFailure|a|b\n")[0]
    assert (failed.reason, failed.name) == ("JobLaunchFailure", "a|b")


def test_parse_sacct_reads_steps_only_for_a_step_out_of_memory() -> None:
    # An array task's steps are named after the task (5_1.0); a step's row is never a
    # job, whatever its name holds.
    rows = [
        "5_1|FAILED|0:03|vm|u|t|t|t|1:0|p1|None|job",
        "5_1.batch|FAILED|0:03|vm||t|t|t|1:0|||batch",
        "5_1.0|OUT_OF_MEMORY|0:02|vm||t|t|t|0:125|||a|b",
        "5_2|FAILED|0:03|vm|u|t|t|t|1:0|p1|None|job",
        "5_2.extern|CANCELLED by 0|0:03|vm||t|t|t|0:15|||extern",
    ]
    jobs = parse_sacct("\n".join(rows) + "\n")
    assert [(j.job_id, j.state) for j in jobs] == [("5_1", "OUT_OF_MEMORY"), ("5_2", "FAILED")]


def test_json_style_null_iso_times_seconds_and_exit_code() -> None:
    j = JobInfo(
        job_id="9", state="FAILED", exit_code="2:0", elapsed="1:05", end_time="2026-11-30T01:00:00"
    )
    d = j.as_json()
    assert d["exit_code"] == 2 and d["signal"] == 0 and d["elapsed_s"] == 65
    assert d["end"] is not None and d["end"].startswith("2026-11-30T") and d["end"][19] in "+-Z"
    assert d["start"] is None and d["node"] is None and d["reason"] is None
    assert d["array_job_id"] is None and d["gpu_indices"] == []
    assert JobInfo(job_id="1", state="PENDING").as_json()["exit_code"] is None


@pytest.mark.parametrize(
    ("line", "want"),
    [
        ("JobId=5 JobName=x\n   Nodes=vm CPU_IDs=0-1 Mem=500 GRES=gpu:1(IDX:1)", {"5": [1]}),
        ("JobId=6 Nodes=vm GRES=gpu:a100:2(IDX:0-1)", {"6": [0, 1]}),
        ("JobId=7 Nodes=vm GRES=gpu(IDX:0,2),mps:0", {"7": [0, 2]}),
        ("JobId=8 Nodes=vm", {"8": []}),
    ],
)
def test_parse_gpu_indices(line: str, want: dict[str, list[int]]) -> None:
    assert parse_gpu_indices(line.replace("\n", "")) == want


def test_expand_ranges() -> None:
    assert expand_ranges("0-2,5") == [0, 1, 2, 5]


def test_parse_job_id() -> None:
    assert parse_job_id("123\n") == "123"
    assert parse_job_id("124;cluster\n") == "124"
    with pytest.raises(ValueError):
        parse_job_id("sbatch: error\n")


def test_status_reads_records_like_the_hooks_and_never_fails_on_one(tmp_path: Path) -> None:
    from acbslurm.gpuvalue import from_lists
    from acbslurm.jobrecord import JobRecord, write_record
    from acbslurm.slurm.jobs import _read_record

    rec = JobRecord("5", "u", 1001, "n1", from_lists("n1", [1], ["GPU-b"], [1]))
    write_record(str(tmp_path), rec)
    assert _read_record(str(tmp_path), "5") == rec
    assert _read_record(str(tmp_path), "6") is None
    assert _read_record(str(tmp_path), "12_[1-3]") is None  # a pending array, no file name
    (tmp_path / "7.json").write_text('{"job_id": "7", "user": "u", "uid": 1, "gpu_indices": ["x"]}')
    assert _read_record(str(tmp_path), "7") is None  # broken: shown without GPUs, no traceback
    assert _read_record("", "5") is None


# Slurm 22.05's output on the sandbox (2026-11-30). The .squeue files were captured with
# squeue's -o format and brought to -O's columns (jobparse.SQUEUE_FORMAT) when status moved
# to it: each row's JobID, AdminComment and WorkDir taken from the .scontrol capture of
# the same moment (the comments were empty then).
CAPTURED = Path(__file__).parent / "captured"


def test_parse_job_gpus_keys_array_tasks_by_their_squeue_id() -> None:
    # Slurm 22.05: task 5_2 is JobId=8; JobId=5 is task 5_3 (the last to start).
    text = (CAPTURED / "array-phase2.scontrol").read_text()
    jobs = parse_job_gpus(text)
    assert (jobs["5_2"].job_id, jobs["5_2"].indices) == ("8", [0])
    assert (jobs["5_3"].job_id, jobs["5_3"].indices) == ("5", [1])
    assert jobs["8"] == jobs["5_2"] and jobs["5"] == jobs["5_3"]
    assert jobs["1_3"].job_id == "1" and jobs["1_3"].indices == []  # completed
    # the array's pending rest (ArrayTaskId=2-3) is only its JobId
    pending = parse_job_gpus((CAPTURED / "array-phase1.scontrol").read_text())
    assert "5_2-3" not in pending and "5_2" not in pending and pending["5"].indices == []
    assert pending["5_0"].indices == [0] and pending["5_1"].indices == [1]


@pytest.mark.parametrize(
    ("phase", "want"),
    [
        ("array-phase1", {"5_0": ([0], "GPU-6"), "5_1": ([1], "GPU-7")}),
        ("array-phase2", {"5_2": ([0], "GPU-8"), "5_3": ([1], "GPU-5")}),
    ],
)
def test_status_shows_each_running_array_task_its_gpu(
    phase: str,
    want: dict[str, tuple[list[int], str]],
    tmp_path: Path,
    fake_slurm: FakeSlurm,
) -> None:
    from acbslurm.gpuvalue import from_lists
    from acbslurm.jobrecord import JobRecord, write_record

    # the prolog names records after SLURM_JOB_ID: the task's own JobId
    for jid, idx in (("6", 0), ("7", 1), ("8", 0), ("5", 1)):
        write_record(
            str(tmp_path),
            JobRecord(jid, "user1", 1001, "vm", from_lists("vm", [idx], [f"GPU-{jid}"], [])),
        )
    fake_slurm.respond("squeue", stdout=(CAPTURED / f"{phase}.squeue").read_text())
    fake_slurm.respond("scontrol", stdout=(CAPTURED / f"{phase}.scontrol").read_text())
    shown = {j.job_id: j for j in query_jobs(record_dir=str(tmp_path))}
    running = {
        k: (j.gpu_indices, ",".join(j.gpu_uuids)) for k, j in shown.items() if j.state == "RUNNING"
    }
    assert running == want
    # every job: one squeue listing, then scontrol for each of the two running tasks (a
    # listing only for more than 16: it costs what the controller's whole table does)
    squeue, *scontrol = fake_slurm.argvs()
    assert squeue == ["squeue", "-a", "-h", "-O", SQUEUE_FORMAT]
    assert sorted(scontrol) == [
        ["scontrol", "-d", "-o", "show", "job", task] for task in sorted(want)
    ]
    pending = [j for j in shown.values() if j.state == "PENDING"]
    assert all(not j.gpu_indices and not j.gpu_uuids for j in pending)


def test_an_array_id_stands_for_its_tasks(fake_slurm: FakeSlurm) -> None:
    # squeue (phase 1 of array 5) still holds 5's tasks; array 1 is only in sacct now,
    # partly in sacct only: a task both know (1_0) comes once, as squeue has it.
    squeue = (CAPTURED / "array-phase1.squeue").read_text().replace("1_1|", "x1_1|")
    sacct = "\n".join(
        [
            "1_0|CANCELLED by 0|00:00:21|vm|user1|2026-11-30T03:30:45|2026-11-30T03:30:45|"
            "2026-11-30T03:31:06|0:0|p1|None|wrap",
            "1_1|FAILED|00:00:21|vm|user1|2026-11-30T03:30:45|2026-11-30T03:30:45|"
            "2026-11-30T03:31:06|3:0|p1|NonZeroExitCode|wrap",
        ]
    )
    fake_slurm.respond("squeue", stdout=squeue)
    fake_slurm.respond("sacct", stdout=sacct)
    fake_slurm.respond("scontrol", stdout="")
    got = query_jobs(["5", "1", "77"])
    assert [(j.job_id, j.state, j.array_job_id) for j in got] == [
        ("5_0", "RUNNING", "5"),
        ("5_1", "RUNNING", "5"),
        ("5_[2-3]", "PENDING", "5"),
        ("1_0", "COMPLETED", "1"),  # squeue's row wins over sacct's
        ("1_1", "FAILED", "1"),  # only sacct still has it
        ("1_2", "COMPLETED", "1"),
        ("1_3", "COMPLETED", "1"),
        ("77", "UNKNOWN", ""),
    ]
    assert [c.value("-j") for c in fake_slurm.calls("sacct")] == ["5,1,77"]
    # a task id is itself, never expanded
    assert [j.job_id for j in query_jobs(["5_1"])] == ["5_1"]
    # the array's own record may show by its bare id for moments: kept while live
    # (a watcher must not miss it), dropped once ended (its tasks tell the same)
    squeue += squeue_row("9", "PENDING", "", start="N/A") + "".join(
        squeue_row(f"9_{t}", "COMPLETED", "vm", own_id=str(10 + t)) for t in (1, 0)
    )
    fake_slurm.respond("squeue", stdout=squeue)
    got = query_jobs(["9"])
    assert [(j.job_id, j.array_job_id) for j in got] == [("9", "9"), ("9_0", "9"), ("9_1", "9")]
    fake_slurm.respond("squeue", stdout=squeue.replace("9|PENDING|", "9|CANCELLED|"))
    assert [j.job_id for j in query_jobs(["9"])] == ["9_0", "9_1"]


def test_a_job_on_two_nodes_has_its_gpus_per_node_with_their_uuids() -> None:
    # Slurm 22.05 (sandbox up --nodes 2): one group for both nodes, Nodes=vm-[1-2].
    job = parse_job_gpus((CAPTURED / "two-nodes.scontrol").read_text())["45"]
    assert job.indices == [0, 1]
    assert [(g.node, g.index) for g in job.gpus] == [
        ("vm-1", 0),
        ("vm-1", 1),
        ("vm-2", 0),
        ("vm-2", 1),
    ]
    # The UUIDs come from squeue's AdminComment, never from scontrol's line, where a
    # job's name may hold "AdminComment=acbslurm:gpus=...".
    assert [g.uuid for g in job.gpus] == [""] * 4


def test_nodes_with_different_gpus_each_keep_their_own() -> None:
    line = (
        "JobId=9 NumNodes=2 AdminComment=acbslurm:gpus=b:1=GPU-b1 Nodes=a CPU_IDs=0 Mem=500 "
        "GRES=gpu:2(IDX:0-1) Nodes=b CPU_IDs=0-1 Mem=500 GRES=gpu:1(IDX:1) Features=x"
    )
    job = parse_job_gpus(line)["9"]
    assert job.gpus == [Gpu("", 0, node="a"), Gpu("", 1, node="a"), Gpu("", 1, node="b")]
    assert JobInfo("9", "RUNNING", gpus=job.gpus).as_json()["gpu_devices"] == [
        {"node": "a", "index": 0, "uuid": None},
        {"node": "a", "index": 1, "uuid": None},
        {"node": "b", "index": 1, "uuid": None},
    ]
    one = "JobId=3 NumNodes=1 Nodes=a CPU_IDs=0 Mem=500 GRES=gpu:1(IDX:0)"
    assert parse_job_gpus(one)["3"].gpus == [Gpu("", 0, node="a")]
    # one node: the indices say it all
    assert JobInfo("3", "RUNNING", gpus=[Gpu("", 0, node="a")]).as_json()["gpu_devices"] == []


def test_a_name_holding_a_group_shows_no_gpus_rather_than_false_ones() -> None:
    """A job named ``x Nodes=a CPU_IDs=0-7 GRES=gpu:4(IDX:0-3)`` is shown without GPUs
    (which group Slurm printed cannot be told), never with the name's four."""
    line = (
        "JobId=9 JobName=x Nodes=a CPU_IDs=0-7 Mem=1 GRES=gpu:4(IDX:0-3) NumNodes=1 "
        "Nodes=a CPU_IDs=0 Mem=500 GRES=gpu:1(IDX:1) Features=x"
    )
    assert parse_job_gpus(line)["9"].gpus == []
    assert parse_job_gpus("JobId=8 JobName=x Nodes=v[m CPU_IDs=0 GRES=gpu:1(IDX:0)")["8"].gpus == []
