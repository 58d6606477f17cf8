"""Every GPU of a multi-node job, from its AdminComment, in the job's node order."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_slurm import FakeSlurm

from acbslurm.errors import SlurmError
from acbslurm.gpuvalue import Gpu
from acbslurm.slurm.gpu_history import gpu_items
from acbslurm.slurm.jobgpus import gpus_in_comment, job_gpus_by_node

# squeue's facts of a sandbox two-node job (vm-2's prolog wrote its token first).
ROW = (Path(__file__).parent / "captured/two-nodes.squeue").read_text()
COMMENT = ROW.split("|", 7)[7].strip()


def test_a_captured_two_node_job_in_node_order() -> None:
    gpus = gpus_in_comment(COMMENT, ["vm-1", "vm-2"])
    assert [(g.node, g.index) for g in gpus] == [("vm-1", 0), ("vm-1", 1), ("vm-2", 0), ("vm-2", 1)]
    assert gpus[0] == Gpu("GPU-93f7abd3-c6bc-e35c-5292-2e29187ec1fd", 0, node="vm-1")
    assert len(gpu_items(COMMENT)) == 4


def test_a_node_without_its_token_is_waited_for_then_named(fake_slurm: FakeSlurm) -> None:
    one_token = ROW.replace(" acbslurm:gpus=vm-1:0=", " x=")
    fake_slurm.respond("squeue", stdout=one_token)
    with pytest.raises(SlurmError, match=r"job 45: no GPUs recorded .* node\(s\) vm-1 after 0.3 s"):
        job_gpus_by_node("45", wait=0.3)
    assert len(fake_slurm.calls("squeue")) >= 2  # asked again while waiting
    fake_slurm.respond("squeue", stdout=ROW)
    assert [g.node for g in job_gpus_by_node("45")] == ["vm-1", "vm-1", "vm-2", "vm-2"]
