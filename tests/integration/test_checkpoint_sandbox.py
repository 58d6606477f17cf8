"""The docs' checkpoint-and-requeue example (conf/examples/checkpoint.yaml, docs/spec.md
"Checkpoint and requeue") on the sandbox, as user1 (issue 28, item 5).

Slurm sends the example's USR1 120 s before the time limit; here user1 sends it early
(`acbslurm cancel --signal USR1`, which signals the job's steps as `--signal` does). The
container saves its step count and exits 85, `acbslurm run` requeues the job, and the
second run (SLURM_RESTART_COUNT=1) resumes from the saved step.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sandboxtest import REPO, RERUN_WAIT, acbslurm_as, no_jobs, wait_job, wait_until
from sandboxtest import acbslurm_as as as_user

pytestmark = pytest.mark.integration

EXAMPLE = REPO / "conf/examples/checkpoint.yaml"


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="acbslurm-ckpt-") as d:
        os.chmod(d, 0o777)  # user1 writes the output and the checkpoint here
        (Path(d) / "ckpt").mkdir(mode=0o777)
        os.chmod(Path(d) / "ckpt", 0o777)
        yield Path(d)


def test_the_checkpoint_example_requeues_and_resumes(sb: Any, idle: Any, workdir: Path) -> None:
    res = as_user(
        sb,
        "user1",
        "submit",
        str(EXAMPLE),
        "--set",
        f"container.mounts=[{workdir / 'ckpt'}:/ckpt]",
        "--set",
        "container.pull=never",
        cwd=workdir,
    )
    assert res.returncode == 0, res.stderr
    job = res.stdout.strip()
    out = workdir / f"checkpoint-{job}.out"
    try:
        wait_until("the first run", lambda: out.exists() and "run 0 from step 0" in out.read_text())
        # Steps are a second each and not printed: after 3 s the saved step is at
        # least 2, so the second run's step tells that it read the checkpoint.
        started = time.monotonic()
        wait_until("three steps", lambda: time.monotonic() - started > 3, timeout=10)
        sent = acbslurm_as(sb, "user1", "cancel", "--signal", "usr1", job)
        assert sent.returncode == 0 and sent.stdout.strip() == f"Sent SIGUSR1 to {job}", sent
        wait_until("the checkpoint", lambda: "saved at step" in out.read_text(), timeout=30)
        saved = (workdir / "ckpt" / "state").read_text().strip()
        fields = wait_job(sb, job, ("PENDING",), 60)
        assert fields.get("Restarts") == "1", fields
        # Eligible again after the sandbox's cred_expire (10 s): it starts on its own.
        wait_until(
            "the second run", lambda: "run 1 from step" in out.read_text(), timeout=RERUN_WAIT
        )
        text = out.read_text()
        assert f"run 1 from step {saved}" in text, text
        assert f"saved at step {saved}" in text, text
        assert f"exited 85 (--requeue-exit): requeueing job {job}" in text, text
        assert "could not be requeued" not in text, text
        assert int(saved) >= 2, text
    finally:
        sb.run_slurm(["scancel", job], check=False)
        no_jobs(sb)
    shown = out.read_text()
    assert re.search(r"^run 0 from step 0$", shown, re.MULTILINE), shown
