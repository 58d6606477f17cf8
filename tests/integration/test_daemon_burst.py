"""A busy Docker daemon is not a dead one (issue 30, item 2), on the sandbox's real
rootless daemon: 64 container starts at once, each through `acbslurm run`'s own
``run_container`` in a process of its own, all complete.

Unthrottled, 128 starts in one daemon once kept starts unanswered past the client's
30 s and failed 146 of 256 jobs. Here the client's timeout is 2 s so that a burst of 64
on a small machine meets it the same way (with only the start asked again, CI's
machine saw creates time out: 13 of 64 failed); what the run does then (ask again while
the daemon answers its ping, a create first looked for by the run's label, a start
first checked) is what is tested. Measured here with a 0.5 s timeout: 546 calls asked
again, all 64 complete.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import pytest
from sandboxtest import IMAGE, REPO, docker_api

pytestmark = pytest.mark.integration

STARTS = 64
LABEL = "acbslurm.job_id=burst-test"
CHILD = """
import sys
from acbslurm.container.launch import LaunchSpec, run_container
from acbslurm.container.options import Limits
from acbslurm.dockerapi.engine import EngineApi
from acbslurm.errors import AcbslurmError

spec = LaunchSpec(image=sys.argv[2], command=["true"], gpus=(), limits=Limits(),
                  job_id="burst-test", user="user1", name=None, grace=5.0)
try:
    sys.exit(run_container(EngineApi(sys.argv[1], timeout=2.0), spec))
except AcbslurmError as exc:
    print(f"failed: {exc}", file=sys.stderr)
    sys.exit(99)
"""


def test_64_container_starts_at_once_in_one_daemon_all_complete(sb: Any) -> None:
    host = sb.env()["DOCKER_HOST"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    api = docker_api(sb)
    t0 = time.monotonic()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, host, IMAGE],
            env=env,
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(STARTS)
    ]
    try:
        done = []
        for p in procs:
            err = p.communicate(timeout=300)[1]
            done.append((p.returncode, err))
        left = api.containers(all=True, filters={"label": LABEL})
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for c in api.containers(all=True, filters={"label": LABEL}):
            api.remove_container(c["Id"], force=True)
    took = time.monotonic() - t0
    busy = sum(err.count("busy, not dead") for _, err in done)
    print(f"{STARTS} starts at once: {took:.1f} s, {busy} waits for a busy daemon")
    failed = [(rc, err.strip().splitlines()[-4:]) for rc, err in done if rc != 0]
    assert failed == [], failed
    assert left == []  # no twin of a create asked twice
