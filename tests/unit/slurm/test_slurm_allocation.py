from fake_slurm import FakeSlurm

from acbslurm.slurm.allocation import (
    Allocation,
    count_cpu_ids,
    job_allocation,
    mem_to_mb,
    parse_scontrol_job,
)

DETAIL = (
    "JobId=12 JobName=x UserId=user1(1001) NumNodes=2 NumCPUs=6 NumTasks=2 "
    "TRES=cpu=6,mem=6G,node=2,billing=6,gres/gpu=2 NodeList=n[1-2] BatchHost=n1 "
    "Nodes=n1 CPU_IDs=0-1,4 Mem=2048 GRES=gpu:1(IDX:0) "
    "Nodes=n2 CPU_IDs=0-2 Mem=4096 GRES=gpu:1(IDX:1) MinCPUsNode=1"
)


def test_per_node_detail() -> None:
    assert parse_scontrol_job(DETAIL, "n1") == Allocation(3, 2048)
    assert parse_scontrol_job(DETAIL, "n2") == Allocation(3, 4096)
    # Multi-node job, node not in the detail: unknown rather than a guess.
    assert parse_scontrol_job(DETAIL, "n3") == Allocation()


def test_single_node_without_detail_uses_totals() -> None:
    line = "JobId=3 NumNodes=1 NumCPUs=2 TRES=cpu=2,mem=1.5G,node=1"
    assert parse_scontrol_job(line, "n1") == Allocation(2, 1536)


def test_units() -> None:
    assert count_cpu_ids("0-3,8,10-11") == 7
    assert mem_to_mb("2G") == 2048
    assert mem_to_mb("512M") == 512
    assert mem_to_mb("2048") == 2048


def test_unreadable_scontrol_output_means_unknown_not_failure(fake_slurm: FakeSlurm) -> None:
    """The prolog must not drain a node because scontrol printed something odd."""
    fake_slurm.respond("scontrol", stdout="JobId=5 NumNodes=1 Nodes=n1 CPU_IDs=0-x Mem=lots\n")
    assert job_allocation("5", "n1") == Allocation()
    assert fake_slurm.argvs() == [["scontrol", "show", "job", "-d", "-o", "5"]]
    # nor because slurmctld did not answer
    fake_slurm.respond("scontrol", stderr="Unable to contact slurm controller\n", rc=1)
    assert job_allocation("5", "n1") == Allocation()
