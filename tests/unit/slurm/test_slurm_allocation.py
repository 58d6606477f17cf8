import pytest
from fake_slurm import FakeSlurm

from acbslurm.errors import SlurmError
from acbslurm.slurm.allocation import (
    Allocation,
    allocation_retried,
    count_cpu_ids,
    gres_gpu_indices,
    job_allocation,
    mem_to_mb,
    own_line,
    parse_scontrol_job,
)

DETAIL = (
    "JobId=12 JobName=x UserId=user1(1001) NumNodes=2 NumCPUs=6 NumTasks=2 "
    "TRES=cpu=6,mem=6G,node=2,billing=6,gres/gpu=2 NodeList=n[1-2] BatchHost=n1 "
    "Nodes=n1 CPU_IDs=0-1,4 Mem=2048 GRES=gpu:1(IDX:0) "
    "Nodes=n2 CPU_IDs=0-2 Mem=4096 GRES=gpu:1(IDX:1) MinCPUsNode=1"
)


def test_per_node_detail() -> None:
    assert parse_scontrol_job(DETAIL, "n1") == Allocation(3, 2048, (0,))
    assert parse_scontrol_job(DETAIL, "n2") == Allocation(3, 4096, (1,))
    # Multi-node job, node not in the detail: unknown rather than a guess.
    assert parse_scontrol_job(DETAIL, "n3") == Allocation()


def test_single_node_without_detail_uses_totals() -> None:
    line = "JobId=3 NumNodes=1 NumCPUs=2 TRES=cpu=2,mem=1.5G,node=1"
    assert parse_scontrol_job(line, "n1") == Allocation(2, 1536)


def test_typed_gres_of_every_type() -> None:
    """Slurm 22.05's prolog gets one type's GPUs in SLURM_JOB_GPUS; scontrol has all."""
    line = (
        "JobId=5 NumNodes=1 Nodes=vm CPU_IDs=0-1 Mem=1000 "
        "GRES=gpu:h200:1(IDX:0),gpu:a100:2(IDX:1,3),nic:1(IDX:0) MinCPUsNode=1"
    )
    assert parse_scontrol_job(line, "vm") == Allocation(2, 1000, (0, 1, 3))
    assert gres_gpu_indices("gpu:4(IDX:0-1,3)") == (0, 1, 3)
    assert gres_gpu_indices("gpu:a100:1(IDX:2),gpugpu:1(IDX:0)") == (2,)
    assert parse_scontrol_job("JobId=5 Nodes=vm CPU_IDs=0 Mem=1", "vm").gpu_indices is None


def test_units() -> None:
    assert count_cpu_ids("0-3,8,10-11") == 7
    assert mem_to_mb("2G") == 2048
    assert mem_to_mb("512M") == 512
    assert mem_to_mb("2048") == 2048


def test_unreadable_scontrol_output_is_an_error_not_no_limits(fake_slurm: FakeSlurm) -> None:
    """The prolog must never fall back silently to "no limits"."""
    fake_slurm.respond("scontrol", stdout="JobId=5 NumNodes=1 Nodes=n1 CPU_IDs=0-x Mem=lots\n")
    with pytest.raises(SlurmError, match="cannot parse scontrol's answer"):
        job_allocation("5", "n1")
    assert fake_slurm.argvs() == [["scontrol", "show", "job", "-d", "-o", "5"]]


def test_an_unreachable_controller_is_an_error_naming_scontrol(fake_slurm: FakeSlurm) -> None:
    fake_slurm.respond("scontrol", stderr="Unable to contact slurm controller\n", rc=1)
    with pytest.raises(SlurmError) as exc:
        job_allocation("5", "n1")
    msg = str(exc.value).splitlines()[0]
    assert "scontrol (from PATH (set slurm_bin_dir)) failed" in msg
    assert "Unable to contact slurm controller" in msg


def test_the_bin_dir_names_the_scontrol_that_runs(fake_slurm: FakeSlurm) -> None:
    fake_slurm.respond("scontrol", stdout="JobId=5 NumNodes=1 NumCPUs=2 TRES=cpu=2,mem=1G\n")
    alloc = job_allocation("5", "n1", bin_dir=str(fake_slurm.bin_dir))
    assert alloc == Allocation(2, 1024)
    assert fake_slurm.calls("scontrol")


def test_no_cpus_is_an_error(fake_slurm: FakeSlurm) -> None:
    fake_slurm.respond("scontrol", stdout="JobId=5 NumNodes=2 NumCPUs=2\n")
    with pytest.raises(SlurmError, match="names no CPUs of job 5 on n1"):
        job_allocation("5", "n1")


def test_an_array_task_never_takes_another_tasks_line() -> None:
    """`scontrol show job <array id>` lists every task: the task's own line, or none."""
    text = (
        "JobId=41 ArrayJobId=40 ArrayTaskId=0 NumNodes=1 NumCPUs=4\n"
        "JobId=40 ArrayJobId=40 ArrayTaskId=1 NumNodes=1 NumCPUs=1\n"
    )
    assert own_line(text, "40").startswith("JobId=40 ")
    assert own_line(text, "39") == ""


def test_the_query_is_asked_again_only_when_scontrol_did_not_answer(
    fake_slurm: FakeSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    from acbslurm.slurm import allocation

    monkeypatch.setattr(allocation, "_RETRY_PAUSE", 0.0)
    fake_slurm.add_job("5", "RUNNING", node="n1", cpu_ids="0-1", mem="1024")
    heard: list[str] = []
    fake_slurm.respond("scontrol", stderr="Unable to contact slurm controller\n", rc=1, times=1)
    alloc, line = allocation_retried("5", "n1", retrying=heard.append)
    assert alloc.cpus == 2 and line.startswith("JobId=5 ")
    assert len(heard) == 1 and "Unable to contact slurm controller" in heard[0]
    # Never more attempts than timeouts; each attempt has its own.
    fake_slurm.respond("scontrol", stderr="Unable to contact slurm controller\n", rc=1)
    with pytest.raises(SlurmError, match="Unable to contact"):
        allocation_retried("5", "n1", timeouts=(1.0, 2.0, 3.0), retrying=heard.append)
    assert len(heard) == 3
    # An answer that cannot be read is not asked again.
    fake_slurm.clear_calls()
    fake_slurm.respond("scontrol", stdout="JobId=5 NumNodes=1 Nodes=n1 CPU_IDs=0-x Mem=lots\n")
    with pytest.raises(SlurmError, match="cannot parse"):
        allocation_retried("5", "n1", retrying=heard.append)
    assert len(fake_slurm.calls("scontrol")) == 1 and len(heard) == 3
