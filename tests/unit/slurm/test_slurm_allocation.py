"""The prolog's reading of a job's allocation: squeue's fields no user writes, and the
one ``Nodes= CPU_IDs=`` group of scontrol's detail that names the node."""

import pytest
from fake_slurm import FakeSlurm
from hypothesis import given, settings
from hypothesis import strategies as st

from acbslurm.errors import SlurmError
from acbslurm.slurm.allocation import (
    JOB_FORMAT,
    Allocation,
    JobFacts,
    allocation_on,
    allocation_retried,
    count_cpu_ids,
    gres_gpu_indices,
    job_allocation,
    mem_to_mb,
    node_groups,
    parse_job_facts,
)

DETAIL = (
    "JobId=12 JobName=x UserId=user1(1001) NumNodes=2 NumCPUs=6 NumTasks=2 "
    "TRES=cpu=6,mem=6G,node=2,billing=6,gres/gpu=2 NodeList=n[1-2] BatchHost=n1 "
    "Nodes=n1 CPU_IDs=0-1,4 Mem=2048 GRES=gpu:1(IDX:0) "
    "Nodes=n2 CPU_IDs=0-2 Mem=4096 GRES=gpu:1(IDX:1) MinCPUsNode=1"
)
TWO_NODES = JobFacts(job_id="12", num_nodes=2, nodes=("n1", "n2"), cpus=6, mem_mb=6144)


def test_per_node_detail() -> None:
    assert allocation_on(TWO_NODES, DETAIL, "n1") == (Allocation(3, 2048, (0,)), 1)
    assert allocation_on(TWO_NODES, DETAIL, "n2") == (Allocation(3, 4096, (1,)), 1)
    # No group names the node: squeue's totals, the node's share.
    assert allocation_on(TWO_NODES, DETAIL, "n3") == (Allocation(3, 3072), 0)


def test_single_node_without_detail_uses_squeue_totals() -> None:
    facts = JobFacts(job_id="3", num_nodes=1, cpus=2, mem_mb=1536)
    assert allocation_on(facts, "JobId=3 NumNodes=1 NumCPUs=2", "n1") == (Allocation(2, 1536), 0)


def test_typed_gres_of_every_type() -> None:
    """Slurm 22.05's prolog gets one type's GPUs in SLURM_JOB_GPUS; scontrol has all."""
    line = (
        "JobId=5 NumNodes=1 Nodes=vm CPU_IDs=0-1 Mem=1000 "
        "GRES=gpu:h200:1(IDX:0),gpu:a100:2(IDX:1,3),nic:1(IDX:0) MinCPUsNode=1"
    )
    assert node_groups(line, "vm") == [Allocation(2, 1000, (0, 1, 3))]
    assert gres_gpu_indices("gpu:4(IDX:0-1,3)") == (0, 1, 3)
    assert gres_gpu_indices("gpu:a100:1(IDX:2),gpugpu:1(IDX:0)") == (2,)
    assert node_groups("JobId=5 Nodes=vm CPU_IDs=0 Mem=1", "vm")[0].gpu_indices is None


REAL = (
    "JobId=7 JobName={name} UserId=user1(1001) NumNodes=1 NumCPUs=1 "
    "TRES=cpu=1,mem=500M,node=1,gres/gpu=1 JOB_GRES=gpu:1   "
    "Nodes=vm CPU_IDs=0 Mem=500 GRES=gpu:1(IDX:1) MinCPUsNode=1 "
    "Command={name} WorkDir=/home/{name} AdminComment=acbslurm:gpus=vm:1=GPU-b "
    "Comment={name} StdOut=/tmp/{name}\n"
)
ONE = JobFacts(job_id="7", num_nodes=1, nodes=("vm",), cpus=1, mem_mb=500)


@pytest.mark.parametrize(
    "name",
    [
        "x Nodes=vm CPU_IDs=0-7 Mem=99999 GRES=gpu:4(IDX:0-3)",  # issue 39's job name
        "x\nJobId=7 Nodes=vm CPU_IDs=0-7 Mem=99999 GRES=gpu:4(IDX:0-3)",
        "x Nodes=n1,vm CPU_IDs=0-7 Mem=99999 GRES=gpu:4(IDX:0-3)",
        "x Nodes=v[m CPU_IDs=0-7",  # a node list that cannot be read counts as naming vm
    ],
)
def test_a_group_in_a_users_text_never_widens_the_allocation(name: str) -> None:
    """Slurm prints the real group; a second one naming the node is a user's text: the
    detail is not trusted, and nothing of it (CPUs, memory, GPUs) is taken."""
    alloc, named = allocation_on(ONE, REAL.format(name=name), "vm")
    assert named >= 2
    assert alloc == Allocation(1, 500)  # squeue's, no GPU indices from text


def test_an_honest_line_reads_its_group() -> None:
    assert allocation_on(ONE, REAL.format(name="train"), "vm") == (Allocation(1, 500, (1,)), 1)


SQUEUE_ROWS = (
    "40|40|1|1|vm|1|cpu=1,mem=500M,node=1,billing=1,gres/gpu=1|(null)\n"
    "41|40|0|2|n[1-2]|4|cpu=4,mem=2G,node=2|keep|me acbslurm:gpus=n1:0=GPU-a\n"
    "42|42|N/A|1|vm|2|cpu=2,mem=1G,node=1|(null)\n"
)


def test_squeue_facts_of_the_jobs_own_row() -> None:
    """An array's id lists every task: the row is the job's own (JobID); the
    AdminComment comes last and keeps its '|'."""
    assert parse_job_facts(SQUEUE_ROWS, "41") == JobFacts(
        job_id="41",
        array_job="40",
        array_task="0",
        num_nodes=2,
        nodes=("n1", "n2"),
        cpus=4,
        mem_mb=2048,
        admin_comment="keep|me acbslurm:gpus=n1:0=GPU-a",
    )
    plain = parse_job_facts(SQUEUE_ROWS, "42")
    assert (plain.array_task, plain.ref(), plain.admin_comment) == ("", "42", "")
    assert parse_job_facts(SQUEUE_ROWS, "40").ref() == "40_1"
    with pytest.raises(ValueError, match="no row of job 39"):
        parse_job_facts(SQUEUE_ROWS, "39")
    assert JOB_FORMAT.endswith(",admin_comment:")


def test_units() -> None:
    assert count_cpu_ids("0-3,8,10-11") == 7
    assert mem_to_mb("2G") == 2048
    assert mem_to_mb("512M") == 512
    assert mem_to_mb("2048") == 2048


def test_an_unreadable_group_is_an_error_not_no_limits(fake_slurm: FakeSlurm) -> None:
    """The prolog must never fall back silently to "no limits"."""
    fake_slurm.add_job("5", "RUNNING", node="n1")
    fake_slurm.respond("scontrol", stdout="JobId=5 NumNodes=1 Nodes=n1 CPU_IDs=0-x Mem=lots\n")
    with pytest.raises(SlurmError, match="names no CPUs of job 5 on n1"):
        job_allocation("5", "n1")
    # Asked at once: the order slurmctld sees them in is not the test's.
    assert sorted(a[:4] for a in fake_slurm.argvs()) == [
        ["scontrol", "show", "job", "-d"],
        ["squeue", "-h", "-j", "5"],
    ]


def test_an_unreachable_controller_is_an_error_naming_the_command(fake_slurm: FakeSlurm) -> None:
    fake_slurm.respond("squeue", stderr="Unable to contact slurm controller\n", rc=1)
    with pytest.raises(SlurmError) as exc:
        job_allocation("5", "n1")
    msg = str(exc.value).splitlines()[0]
    assert "squeue (from PATH (set slurm_bin_dir)) failed" in msg
    assert "Unable to contact slurm controller" in msg


def test_the_bin_dir_names_the_commands_that_run(fake_slurm: FakeSlurm) -> None:
    fake_slurm.add_job("5", "RUNNING", node="n1", cpu_ids="0-1", mem="1024")
    alloc, facts, named = job_allocation("5", "n1", bin_dir=str(fake_slurm.bin_dir))
    assert (alloc, facts.cpus, named) == (Allocation(2, 1024, ()), 2, 1)
    assert fake_slurm.calls("scontrol") and fake_slurm.calls("squeue")


def test_an_array_task_is_asked_of_scontrol_by_its_own_name(fake_slurm: FakeSlurm) -> None:
    fake_slurm.add_job("40_1", "RUNNING", job_id="40", node="n1", cpu_ids="0-1")
    fake_slurm.add_job("40_0", "RUNNING", job_id="41", node="n1", cpu_ids="0-3")
    alloc, facts, named = job_allocation("40", "n1")
    assert (alloc.cpus, facts.ref(), named) == (2, "40_1", 1)
    assert ["scontrol", "show", "job", "-d", "-o", "40_1"] in fake_slurm.argvs()


def test_no_row_is_an_error(fake_slurm: FakeSlurm) -> None:
    fake_slurm.respond("squeue", stdout="")
    with pytest.raises(SlurmError, match="no row of job 5"):
        job_allocation("5", "n1")


def test_the_query_is_asked_again_only_when_slurm_did_not_answer(
    fake_slurm: FakeSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    from acbslurm.slurm import allocation

    monkeypatch.setattr(allocation, "_RETRY_PAUSE", 0.0)
    fake_slurm.add_job("5", "RUNNING", node="n1", cpu_ids="0-1", mem="1024")
    heard: list[str] = []
    fake_slurm.respond("scontrol", stderr="Unable to contact slurm controller\n", rc=1, times=1)
    alloc, facts, _ = allocation_retried("5", "n1", retrying=heard.append)
    assert alloc.cpus == 2 and facts.job_id == "5"
    assert len(heard) == 1 and "Unable to contact slurm controller" in heard[0]
    # Never more attempts than timeouts; each attempt has its own.
    fake_slurm.respond("scontrol", stderr="Unable to contact slurm controller\n", rc=1)
    with pytest.raises(SlurmError, match="Unable to contact"):
        allocation_retried("5", "n1", timeouts=(1.0, 2.0, 3.0), retrying=heard.append)
    assert len(heard) == 3
    # An answer that cannot be read is not asked again.
    fake_slurm.clear_calls()
    fake_slurm.respond("scontrol", stdout="JobId=5 NumNodes=1 Nodes=n1 CPU_IDs=0-x Mem=lots\n")
    with pytest.raises(SlurmError, match="names no CPUs"):
        allocation_retried("5", "n1", retrying=heard.append)
    assert len(fake_slurm.calls("scontrol")) == 1 and len(heard) == 3


# Every user-settable field of scontrol's line at once: the job's name, command, work
# dir, comment and output path carry the same arbitrary text, Slurm's words included.
_WORDS = st.sampled_from(
    [
        "Nodes=vm",
        "CPU_IDs=0-7",
        "Mem=99999",
        "GRES=gpu:4(IDX:0-3)",
        "AdminComment=",
        "JobId=7",
        "NumNodes=9",
        "acbslurm:gpus=vm:0=GPU-x",
        "|",
        "\x1f",
        "\n",
        " ",
        "\t",
    ]
)
_USER_TEXT = st.lists(st.one_of(_WORDS, st.text(max_size=12)), max_size=12).map("".join)


@settings(max_examples=200)
@given(_USER_TEXT)
def test_no_user_text_widens_the_allocation(text: str) -> None:
    """Whatever a user writes in the fields they may set, the prolog reads the real
    group (one CPU, 500 MB, GPU 1) or squeue's totals without GPUs: never more."""
    got = allocation_on(ONE, REAL.replace("{name}", text), "vm")
    assert got == (Allocation(1, 500, (1,)), 1) or (got[0] == Allocation(1, 500) and got[1] >= 2)


@settings(max_examples=200)
@given(_USER_TEXT)
def test_no_admin_text_moves_the_facts(comment: str) -> None:
    """squeue's fields before the AdminComment stay the job's whatever the comment holds
    (an admin's text, written last)."""
    row = "7|7|N/A|1|vm|1|cpu=1,mem=500M,node=1|" + comment.replace("\n", " ") + "\n"
    facts = parse_job_facts(row, "7")
    assert (facts.num_nodes, facts.nodes, facts.cpus, facts.mem_mb) == (1, ("vm",), 1, 500)
