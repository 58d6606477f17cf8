"""Issue 39's attacks through Slurm's text, replayed as user1 would on the sandbox: a
job whose name, comment and working directory carry Slurm's own words (``Nodes=``,
``CPU_IDs=``, ``GRES=``, ``AdminComment=``, ``JobId=``, ``NumNodes=``, acbslurm's
tokens, ``|``, 0x1f, newlines) while user2's job holds the node's other GPU.

Before the fix the prolog read those words as the job's allocation (every GPU of the
node, user2's included, through the fence and into the container) and wrote the name's
``AdminComment=`` back as the admin's (a pool's usage under a key "victim"). Now the
job opens its one GPU, its container gets that one, and its AdminComment holds the
prolog's token alone.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
from sandboxtest import IMAGE, REPO, acbslurm_run, report_json, wait_until
from test_fault_gpu_fence import PROBE, job_gpu, opens, settings, submit_as

from acbslurm.jobrecord import read_record

pytestmark = pytest.mark.integration


def _fields(node: str) -> str:
    """Every word of scontrol's line the old parsers took, set to widen the job."""
    return (
        f"x Nodes={node} CPU_IDs=0-1 Mem=99999 GRES=gpu:2(IDX:0-1) NumNodes=1 JobId=1 "
        f"AdminComment=acbslurm:usage={node};leased=99999;victim,llama=1000,10,10,500 "
        f"acbslurm:gpus={node}:1=GPU-fake | \x1f"
    )


def _done_output(out: Path) -> str:
    """The job's output once its container has printed ("" before)."""
    text = out.read_text() if out.exists() else ""
    return text if "ctr uuids=" in text else ""


def _stored(sb: Any, job: str) -> str:
    """``STATE|ADMINCOMMENT`` of the job in slurmdbd once it completed ("" before)."""
    argv = ["sacct", "-X", "-n", "-P", "-j", job, "-o", "State,AdminComment"]
    row = str(sb.run_slurm(argv).stdout.strip())
    return row if row.startswith("COMPLETED|") else ""


def test_a_job_named_as_slurm_speaks_gets_its_one_gpu(idle: Any, scripts: Path) -> None:
    sb = idle
    node = sb.run_slurm(["sinfo", "-h", "-o", "%N"]).stdout.strip()
    files = [g.device for g in sb.gpus]
    # user2's job takes one GPU first: the hostile job must never open it.
    theirs = submit_as(sb, "user2", scripts, "exec sleep 300")
    held = job_gpu(sb, theirs)
    workdir = scripts / f"w Nodes={node} CPU_IDs=0-1 GRES=gpu:2(IDX:0-1)"
    workdir.mkdir()
    workdir.chmod(0o777)
    probe = shlex.join([sys.executable, "-c", PROBE, *files])
    container = acbslurm_run(IMAGE, "sh", "-c", 'echo "ctr uuids=$ACBSLURM_GPU_UUIDS"')
    script = scripts / "hostile.sh"
    script.write_text(f"#!/bin/bash\n{probe}\n{container}\n")
    script.chmod(0o755)
    name = _fields(node) + "\n" + _fields(node)
    argv = ["sbatch", "--parsable", "--gres=gpu:1", "-J", name, "--comment", _fields(node)]
    argv += ["-D", str(workdir), "-o", f"{scripts}/out-%j.txt", str(script)]
    job = str(sb.run_as_user(argv, extra_env={"PYTHONPATH": str(REPO)}).stdout.strip())
    mine = job_gpu(sb, job)
    assert mine != held
    rec = read_record(settings(sb).record_dir, job)
    assert rec is not None and len(rec.gpus) == 1 and rec.cpus == 1, rec
    assert rec.mem_mb < 99999
    out = scripts / f"out-{job}.txt"
    text = wait_until("the job's container", lambda: _done_output(out), 120)
    probed = json.loads(next(ln for ln in text.splitlines() if ln.startswith("{")))
    assert probed == {mine: "ENXIO", held: "EACCES"}
    uuids = next(ln for ln in text.splitlines() if ln.startswith("ctr uuids="))[10:].split(",")
    assert uuids == [rec.gpus[0].uuid]
    # The AdminComment is the prolog's token alone: nothing of the name, the comment or
    # the directory reached the admin's field, in slurmctld and in slurmdbd.
    token = f"acbslurm:gpus={node}:{rec.gpus[0].index}={rec.gpus[0].uuid}"
    stored = wait_until("the job's end in slurmdbd", lambda: _stored(sb, job), 120)
    assert stored == f"COMPLETED|{token}"
    keys = report_json(sb, "--by", "key")
    assert "victim" not in json.dumps(keys)
    # user2's GPU stayed user2's: user1 opens nothing outside a job, user2 theirs.
    sb.run_slurm(["scancel", theirs])
    assert opens(sb, "user1", files) == dict.fromkeys(files, "EACCES")
