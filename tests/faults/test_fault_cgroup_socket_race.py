"""A job's user cannot get a root file through the job's cgroup helper (issue 39), on
the real sandbox with ``container_cgroups: join`` (its setting), as user1.

The helper binds its socket and hands it to the job's user (chown) as root. Bound in
the user's own job directory, the user could swap a link to a root file in at the
socket's name between the two (renameat2 RENAME_EXCHANGE), and root's chown followed
the link. Here user1 races that in every job of an array (cgroup_socket_racer.py,
started before them, watching the job runtime directory), at every name the helper
binds: a root-owned 0600 file stays root's and 0600, each job's helper still hands its
socket to user1, and every swap or plant into the helper's directory is refused.
"""

from __future__ import annotations

import json
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from sandboxtest import REPO, submit, wait_gone

from acbslurm.config import load_settings

pytestmark = pytest.mark.integration

RACER = Path(__file__).with_name("cgroup_socket_racer.py")
# Jobs raced: as many as end in about 60 s on the sandbox (8 at a time on its 8 CPUs).
JOBS = 100


def test_a_user_racing_the_helpers_socket_never_gets_a_root_file(idle: Any, scripts: Path) -> None:
    sb = idle
    base = load_settings(str(sb.layout.acbslurm_conf)).job_runtime_dir
    with tempfile.TemporaryDirectory(prefix="acbslurm-secret-") as secret:  # root's, 0700
        target = Path(secret) / "shadow"
        target.write_text("root's alone\n")
        target.chmod(0o600)
        racer = subprocess.Popen(
            [sys.executable, "-s", str(RACER), base, str(target), str(scripts)],
            user=sb.uid,
            env={**sb.user_env("user1"), "PYTHONPATH": str(REPO)},
            cwd="/",
        )
        try:
            # Each job names itself (the racer races every job of user1's, as an
            # attacker would: other tests' too) and lives until the racer is done with
            # it (its helper bound and raced), so every helper binds while it runs.
            mark = f"{scripts}/raced-$SLURM_JOB_ID"
            body = (
                f"touch {scripts}/task-$SLURM_JOB_ID\n"
                f'for i in $(seq 300); do [ -e "{mark}" ] && exit 0; sleep 0.1; done\nexit 1'
            )
            job = submit(sb, scripts, body, f"--array=1-{JOBS}", "-c1", "--mem=100")
            wait_gone(sb, job, 180)
        finally:
            racer.terminate()
            racer.wait(30)
        st = target.stat()
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o600)
    assert racer.returncode == 0
    raced = json.loads((scripts / "racer.json").read_text())["jobs"]
    mine = sorted(p.name.removeprefix("task-") for p in scripts.glob("task-*"))
    assert len(mine) == JOBS and set(mine) <= set(raced), (mine, sorted(raced))
    jobs = {j: raced[j] for j in mine}
    unbound = [j for j, got in jobs.items() if not got["bound"]]
    assert not unbound, f"no helper socket seen in jobs {unbound}"
    # Each helper handed its socket to user1 in its own directory, whatever was raced.
    assert all(got["socket"] == sb.uid for got in jobs.values()), jobs
    assert sum(got["planted"] + got["swaps"] for got in jobs.values()) == 0, jobs
    # The racer did reach the helper's socket, and was refused there each time.
    assert all(got["refused"] > 0 for got in jobs.values()), jobs
