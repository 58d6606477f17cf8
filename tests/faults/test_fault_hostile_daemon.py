"""A job user's own "Docker daemon" against the root epilog, on the sandbox, as user2.

user2 (who has no daemon of their own) runs swapping_dockerd.py where the site's
``docker_host`` names their socket: it lists a container of user1's real daemon as the
job's, then puts a link to user1's socket in its own place before the epilog's removal
connects. The epilog must remove nothing of user1's: it asks no daemon but one served by
the job's uid, through no link. It drains the node (user2's containers are not known to
be gone), as any daemon that fails a sweep does; the admin resumes it.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sandboxtest import IMAGE, docker_api, wait_gone, wait_job, wait_until

from acbslurm.config import load_settings
from acbslurm.dockerapi.engine import socket_path
from acbslurm.dockerapi.hosts import user_docker_host

pytestmark = pytest.mark.integration

SWAPPER = Path(__file__).with_name("swapping_dockerd.py")


def node(sb: Any) -> dict[str, str]:
    out = sb.run_slurm(["scontrol", "show", "node", "-o"]).stdout.splitlines()[0]
    head, _, reason = out.strip().partition(" Reason=")  # last, and may hold blanks
    return {**dict(t.partition("=")[::2] for t in head.split() if "=" in t), "Reason": reason}


@pytest.fixture
def undrained(idle: Any) -> Iterator[Any]:
    """As ``idle``; the node the case drains is resumed (what the admin does)."""
    yield idle
    if "DRAIN" in (n := node(idle))["State"]:
        idle.run_slurm(["scontrol", "update", f"nodename={n['NodeName']}", "state=resume"])


def slurmd_log(sb: Any) -> str:
    return Path(sb.layout.log_file("slurmd")).read_text(errors="replace")


def lines(path: Path) -> list[dict[str, Any]]:
    try:
        return [json.loads(x) for x in path.read_text().splitlines()]
    except FileNotFoundError:
        return []


def test_a_user_cannot_make_the_epilog_remove_another_users_container(
    undrained: Any, scripts: Path
) -> None:
    sb = undrained
    api = docker_api(sb)  # user1's daemon
    victim = api.create_container(IMAGE, ["sleep", "600"], labels={"acbslurm.test": "victim"})
    victim_id = victim["Id"]
    api.start(victim_id)
    user2 = pwd.getpwnam("user2")
    own_socket = socket_path(
        user_docker_host(load_settings(str(sb.layout.acbslurm_conf)), user2.pw_uid, "user2")
    )
    log = scripts / f"swapper-{os.urandom(4).hex()}.jsonl"
    script = scripts / f"victimless-{os.urandom(4).hex()}.sh"
    script.write_text("#!/bin/bash\nexec sleep 300\n")
    script.chmod(0o755)
    argv = ["sbatch", "--parsable", "-o", f"{scripts}/out-%j.txt", str(script)]
    job = sb.run_as("user2", argv, timeout=30).stdout.strip().split(";")[0]
    fake = None
    try:
        wait_job(sb, job, ("RUNNING",), 60)
        victim_socket = socket_path(sb.env()["DOCKER_HOST"])
        fake = subprocess.Popen(
            [sys.executable, str(SWAPPER), own_socket, victim_socket, victim_id, str(log)],
            user=user2.pw_uid,
            group=user2.pw_gid,
            extra_groups=[],
            env=sb.user_env("user2"),
            cwd="/",
            stdout=subprocess.PIPE,
            text=True,
        )
        assert fake.stdout is not None and fake.stdout.readline() == "listening\n"
        sb.run_slurm(["scancel", job])
        wait_gone(sb, job)
        seen = lines(log)
        # It was asked (it is user2's), answered, swapped; nothing reached user1's daemon.
        assert any("swapped" in x for x in seen), seen
        assert not any(x.get("request", "").startswith("DELETE") for x in seen), seen
        state = api.inspect_container(victim_id)["State"]
        assert state["Running"], state
        n = wait_until("the node to be drained", lambda: "DRAIN" in node(sb)["State"] and node(sb))
        assert n["Reason"].startswith(f"acbslurm: job {job}: "), n
        # The failed epilog's output, in slurmd's log: why.
        refused = (
            f"job {job}: Docker at unix://{own_socket}: {own_socket} is a link, not the "
            f"socket of uid {user2.pw_uid}'s daemon: refused"
        )
        wait_until("slurmd's log of the epilog", lambda: refused in slurmd_log(sb), 30)
    finally:
        if fake is not None:
            fake.terminate()
            fake.wait(10)
            if fake.stdout is not None:
                fake.stdout.close()
        api.remove_container(victim_id, force=True)
        api.close()
