"""The prolog when slurmctld does not answer it in time (issue 30, item 1), on the real
sandbox: the record of a job never depends on the controller's pace.

A burst of prologs once made slurmctld answer the array's last task (whose raw id is the
array's own id) after the prolog's 5 s limit; the prolog then wrote `scontrol update
job=<array id> AdminComment=...`, which Slurm applies to every task of the array, and the
report showed that task's GPU on every task. Here a stand-in scontrol, first in the
hooks' ``slurm_bin_dir``, never answers the prolog's ``show job -d`` of that one id (every
other call goes to the real scontrol), while another task of the array still runs; each
task's reported devices are then checked against what it really got.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sandboxtest import IMAGE, acbslurm_run, report_json, submit, wait_job, wait_until

pytestmark = pytest.mark.integration

ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL")

# Stalls the prolog's queries of job ID when ID is the one in STALL: squeue's facts of
# the job (-O ...admin_comment:) and scontrol's detail (show job -d); logs each stall.
# `exec sleep`: the prolog's timeout kills the stand-in itself, as it would a hung client.
STANDIN = """#!/bin/bash
stall=$(cat {stall} 2>/dev/null)
me=$(basename "$0")
d=0; show=0; facts=0; id=""
for a in "$@"; do case "$a" in
  -d) d=1;; show) show=1;; *admin_comment:) facts=1;; -o|-h|-j|-O|job) ;; *) id=$a;;
esac; done
if [ -n "$stall" ] && [ "$id" = "$stall" ] \\
    && {{ [ "$me$d$show" = scontrol11 ] || [ "$me$facts" = squeue1 ]; }}; then
  echo "stalled $me $*" >> {log}
  exec sleep 120
fi
exec {real}/$me "$@"
"""


@contextlib.contextmanager
def stalling_scontrol(sb: Any) -> Iterator[tuple[Path, Path]]:
    """The hooks' ``slurm_bin_dir`` pointed at a stand-in directory for the test (every
    other Slurm client linked to the real one); its stall file and its log. The
    settings are always restored."""
    conf = sb.layout.acbslurm_conf
    original = conf.read_text()
    settings = json.loads(original)
    real = Path(settings["slurm_bin_dir"] or "/usr/bin")
    with tempfile.TemporaryDirectory(prefix="acbslurm-standin-") as d:
        bin_dir = Path(d)
        bin_dir.chmod(0o755)  # `acbslurm run` (user1) reads the same settings
        for client in real.glob("s*"):
            if client.name not in ("scontrol", "squeue"):
                (bin_dir / client.name).symlink_to(client)
        stall, log = bin_dir / "stall", bin_dir / "stalled.log"
        for name in ("scontrol", "squeue"):
            script = bin_dir / name
            script.write_text(STANDIN.format(stall=stall, log=log, real=real))
            script.chmod(0o755)
        try:
            conf.write_text(json.dumps({**settings, "slurm_bin_dir": str(bin_dir)}, indent=2))
            yield stall, log
        finally:
            conf.write_text(original)


def hooks_log_since(sb: Any) -> Any:
    path = sb.layout.log_file("hooks")
    start = path.stat().st_size if path.exists() else 0

    def text() -> str:
        with open(path, "rb") as f:
            f.seek(start)
            return f.read().decode(errors="replace")

    return text


def test_an_arrays_last_task_whose_controller_stalls_writes_no_other_tasks_record(
    idle: Any, scripts: Path
) -> None:
    """3 one-GPU tasks on 2 GPUs: tasks 0 and 1 start, task 0 ends, the last task starts
    with the array's id while task 1 still runs. Its prolog's query never answers (both
    attempts): its AdminComment is not written, and said so; task 1's keeps its own GPU.
    Each task is reported on the GPU its container saw (the last one, whose container
    was refused, on the GPU slurmd gave it), and no device is shown twice."""
    t0 = int(time.time()) - 1
    gate = scripts / f"gate-{time.monotonic_ns()}"
    ctr = acbslurm_run(IMAGE, "sh", "-c", 'echo "ctr uuids=$ACBSLURM_GPU_UUIDS"')
    body = (
        'echo "host job=$SLURM_JOB_ID gpus=$SLURM_JOB_GPUS"\n'
        f'{ctr} || echo "run refused"\n'
        # Every task but task 0 and the last (the array's id) waits for the gate: one
        # still runs while the last one's prolog does.
        'if [ "$SLURM_JOB_ID" != "$SLURM_ARRAY_JOB_ID" ] && [ "$SLURM_ARRAY_TASK_ID" != 0 ]; '
        f"then n=0; while [ ! -e {shlex.quote(str(gate))} ] && [ $n -lt 1200 ]; "
        "do sleep 0.1; n=$((n+1)); done; fi\n"
        "echo done"
    )
    said = hooks_log_since(idle)
    with stalling_scontrol(idle) as (stall, stalled):
        job = submit(
            idle, scripts, body, "--gres=gpu:1", "--array=0-2", "-o", f"{scripts}/arr-%A_%a.txt"
        )
        stall.write_text(job)  # before the last task can start: task 0 must end first
        outs = {t: scripts / f"arr-{job}_{t}.txt" for t in range(3)}

        def last_task_done() -> int | None:
            for t, p in outs.items():
                text = p.read_text() if p.exists() else ""
                if f"host job={job} " in text and "done" in text.splitlines()[-1:]:
                    return t
            return None

        try:
            last = wait_until(f"the last task of array {job} to end", last_task_done, 120)
        finally:
            gate.write_text("")
        tasks = [wait_job(idle, f"{job}_{t}", ENDED, 120) for t in range(3)]
        stalls = stalled.read_text() if stalled.exists() else ""
        # The last task's GPU is in its record (kept by its prolog from slurmd's
        # SLURM_JOB_GPUS), which its epilog's detached sender writes to its own
        # SystemComment, through the hooks' Slurm clients: the stand-in's, which must
        # stay until the sender is done.
        keys = {f"{job}_{t}" for t in range(3)}

        def reported() -> dict[str, list[str]] | None:
            doc = report_json(idle, "--start", f"@{t0}")
            rows = {j["job_id"]: [d["uuid"] for d in j["gpu_devices"]] for j in doc["jobs"]}
            rows = {k: v for k, v in rows.items() if k in keys}
            return rows if len(rows) == 3 and all(rows.values()) else None

        rows = wait_until(f"array {job}'s devices in slurmdbd", reported, 90)
    assert [f["JobState"] for f in tasks] == ["COMPLETED"] * 3
    # Asked twice, within the bound (each time squeue and, beside it, scontrol).
    assert stalls.count("stalled squeue") == 2, (stalls, said())

    uuid_of = {str(g.index): g.uuid for g in idle.gpus}
    got: dict[str, list[str]] = {}
    for t, p in outs.items():
        text = p.read_text()
        if t == last:
            index = text.split("gpus=", 1)[1].split()[0]
            got[f"{job}_{t}"] = [uuid_of[index]]
            assert "ctr uuids=" not in text and "run refused" in text, text
        else:
            got[f"{job}_{t}"] = text.split("ctr uuids=", 1)[1].split()[0].split(",")
    mine = got[f"{job}_{last}"]
    log = said()
    lines = [ln for ln in log.splitlines() if "not in its AdminComment" in ln]
    assert len(lines) == 1 and f"job {job}: GPUs {mine[0]} kept in its record" in lines[0], log
    assert f"job {job}: GPUs {mine[0]} recorded in" in log

    # The report shows each task on its own GPU, the last on the one slurmd gave it.
    assert rows == got, (rows, got)
    assert report_json(idle, "--start", f"@{t0}")["data_errors"]["gpu_overlaps"] == 0
