"""The job's cgroup helper refuses what it must (tests of issue 26's "bad input and
faults"), on the real sandbox as user1 and user2: each refusal is one clear line and
moves nothing.

- user2 cannot reach user1's job's helper at all (its socket is user1's, 0600);
- user1, inside its job, cannot have the helper move a plain process of its own, its
  own Docker daemon (in its user namespace, but no container), a process of root's, or
  anything on behalf of a process outside the job; bad requests are refused;
- with the helper gone, `acbslurm run` in the job starts no container, and a `docker
  exec` into the job's running container runs nothing, each saying why;
- a job that ends while its container's move is under way (the helper stopped with the
  request in hand) leaves no container and no helper, and its command never ran.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from sandboxtest import IMAGE, REPO, acbslurm_run, dockerd_pid, submit, wait_job, wait_until

from acbslurm.cgroups.helper import pid_file, socket_path
from acbslurm.config import load_settings

pytestmark = pytest.mark.integration

ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL")

# Sends each request (argv: socket, then JSON texts or "raw:TEXT") to the helper;
# prints the answers as a JSON list, with this process's cgroup before and after.
ASK = r"""
import json, os, socket, sys
def ask(path, line):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(20)
    s.connect(path)
    s.sendall(line.encode() + b"\n")
    data = b""
    while b"\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    return json.loads(data.split(b"\n")[0] or b"null")
me = os.getpid()
before = open("/proc/self/cgroup").read()
answers = []
for req in sys.argv[3:]:
    line = req[4:] if req.startswith("raw:") else req.replace("ME", str(me))
    answers.append(ask(sys.argv[2], line))
after = open("/proc/self/cgroup").read()
open(sys.argv[1], "w").write(json.dumps({"answers": answers, "same": before == after}))
"""


def settings(sb: Any) -> Any:
    return load_settings(str(sb.layout.acbslurm_conf))


def helper_socket(sb: Any, job: str) -> str:
    return socket_path(settings(sb).job_runtime_dir, job)


def test_the_helper_refuses_what_is_not_the_jobs_container(idle: Any, scripts: Path) -> None:
    sb = idle
    script = scripts / "ask.py"
    script.write_text(ASK)
    daemon = dockerd_pid(sb)
    rooted = int((sb.layout.run / "slurmd.pid").read_text().split()[0])
    result = scripts / f"asked-{os.urandom(4).hex()}.json"
    job = submit(sb, scripts, "exec sleep 300", "--gres=gpu:1")
    wait_job(sb, job, ("RUNNING",), 60)
    sock = helper_socket(sb, job)
    wait_until("the job's helper", lambda: os.path.exists(sock), 30)
    daemon_cgroup = Path(f"/proc/{daemon}/cgroup").read_text()
    requests = [
        '{"run_pid": ME, "container_pid": ME}',  # a plain process of the user's
        f'{{"run_pid": ME, "container_pid": {daemon}}}',  # in the user's namespace, no container
        f'{{"run_pid": ME, "container_pid": {rooted}}}',  # root's (slurmd)
        f'{{"run_pid": {rooted}, "container_pid": ME}}',  # for a process outside the job
        '{"run_pid": "ME", "container_pid": 1}',
        "raw:not json",
        # an exec's request from a plain process: the asker is moved, and it is not in
        # the user's daemon (the pid named is ignored: the kernel's is used)
        f'{{"run_pid": ME, "exec": true, "container_pid": {daemon}}}',
    ]
    step = ["srun", "--jobid", job, "--overlap", "--gres=gpu:0", sys.executable]
    r = sb.run_as_user(
        [*step, str(script), str(result), sock, *requests],
        check=False,
        timeout=60,
        extra_env={"PYTHONPATH": str(REPO)},
    )
    assert r.returncode == 0, r.stderr
    got = json.loads(result.read_text())
    errors = [a["error"] for a in got["answers"]]
    assert all(a["ok"] is False for a in got["answers"]), got
    assert "is not in a rootless container" in errors[0]
    assert "is not a container's" in errors[1]
    assert "is not in a rootless container" in errors[2]
    assert "belongs to uid 0" in errors[3]
    assert "must be a process id" in errors[4]
    assert errors[5]
    assert "is not in a rootless Docker" in errors[6]
    assert got["same"], "the asking process was moved"
    assert Path(f"/proc/{daemon}/cgroup").read_text() == daemon_cgroup

    # user2 cannot even reach it: the socket is user1's, 0600.
    r2 = sb.run_as(
        "user2",
        [sys.executable, str(script), str(scripts / "user2.json"), sock, '{"run_pid": 1}'],
        check=False,
        timeout=30,
    )
    assert r2.returncode != 0
    assert "PermissionError" in r2.stderr, r2.stderr
    sb.run_slurm(["scancel", job])
    wait_job(sb, job, ENDED, 60)
    # The epilog ended the helper.
    wait_until(
        "the helper's end", lambda: not os.path.exists(pid_file(settings(sb).record_dir, job)), 30
    )


def test_without_its_helper_a_job_starts_no_container(idle: Any, scripts: Path) -> None:
    """The helper killed mid-job: the next `acbslurm run` fails with a line naming the
    helper, and no container of the job runs (Docker's create is undone)."""
    sb = idle
    go = scripts / f"go-{os.urandom(4).hex()}"
    run = acbslurm_run(IMAGE, "echo", "started")
    body = f"while [ ! -e {go} ]; do sleep 0.2; done\n{run}\necho rc=$?"
    job = submit(sb, scripts, body, "--gres=gpu:1")
    wait_job(sb, job, ("RUNNING",), 60)
    pids = Path(pid_file(settings(sb).record_dir, job))
    wait_until("the job's helper", pids.exists, 30)
    pid = int(pids.read_text().split()[0])
    os.kill(pid, signal.SIGKILL)
    wait_until("the helper's death", lambda: not Path(f"/proc/{pid}").exists(), 30)
    go.touch()
    assert wait_job(sb, job, ENDED, 90)["JobState"] == "COMPLETED"
    out = (scripts / f"out-{job}.txt").read_text()
    assert "started" not in out, out
    assert "cgroup helper" in out, out
    rc = int(out.rpartition("rc=")[2].split()[0])
    assert rc != 0, out


def test_without_its_helper_an_exec_into_the_jobs_container_runs_nothing(
    idle: Any, scripts: Path
) -> None:
    """The helper killed while the job's container runs: a `docker exec` into it fails
    with a line naming the helper, and its command never runs."""
    from sandboxtest import container_job, docker_api

    sb = idle
    mark = f"ran-{os.urandom(4).hex()}"
    run = acbslurm_run("--mount", f"{scripts}:/out", IMAGE, "sleep", "300")
    api = docker_api(sb)
    job, running = container_job(sb, api, scripts, "exec srun " + run)
    container = running["Id"]
    pids = Path(pid_file(settings(sb).record_dir, job))
    pid = int(pids.read_text().split()[0])
    os.kill(pid, signal.SIGKILL)
    wait_until("the helper's death", lambda: not Path(f"/proc/{pid}").exists(), 30)
    ex = api.exec_create(container, ["touch", f"/out/{mark}"])["Id"]
    out = api.exec_start(ex).decode()  # Docker's error comes in the exec's output
    assert "cgroup helper does not answer" in out, out
    # Docker's "could not run": 126 from 20.10, 128 from 28.5
    assert api.exec_inspect(ex)["ExitCode"] in (126, 128)
    assert not (scripts / mark).exists()
    sb.run_slurm(["scancel", job])
    wait_job(sb, job, ENDED, 60)


def _runtime_waits_for_its_helper(uid: int) -> bool:
    """A runtime of a create is waiting for the helper's answer: its Python runs and no
    `runc create` does any more (runc has made the container's first process)."""
    waiting = making = False
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid != uid:
                continue
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        waiting |= any(b"import created" in a for a in argv)
        making |= argv[0].endswith(b"runc") and b"create" in argv
    return waiting and not making


def test_a_job_that_ends_while_its_container_is_moved_leaves_nothing(
    idle: Any, scripts: Path
) -> None:
    """The job's helper stopped (SIGSTOP) with a create's request in hand, the job
    cancelled meanwhile, then the helper let go on: the user's command never ran, no
    container of the job is left, the helper ends, and the node is not drained."""
    from sandboxtest import docker_api, job_containers

    sb = idle
    go = scripts / f"go-{os.urandom(4).hex()}"
    mark = f"ran-{os.urandom(4).hex()}"
    run = acbslurm_run("--mount", f"{scripts}:/out", IMAGE, "touch", f"/out/{mark}")
    job = submit(
        sb, scripts, f"while [ ! -e {go} ]; do sleep 0.2; done\nexec srun {run}", "--gres=gpu:1"
    )
    wait_job(sb, job, ("RUNNING",), 60)
    pids = Path(pid_file(settings(sb).record_dir, job))
    wait_until("the job's helper", pids.exists, 30)
    helper = int(pids.read_text().split()[0])
    wait_until("the helper's socket", lambda: os.path.exists(helper_socket(sb, job)), 30)
    uid = sb.uid
    os.kill(helper, signal.SIGSTOP)
    try:
        go.touch()
        wait_until(
            "a create waiting for the helper", lambda: _runtime_waits_for_its_helper(uid), 60
        )
        sb.run_slurm(["scancel", job])
        wait_job(sb, job, ENDED, 60)
    finally:
        os.kill(helper, signal.SIGCONT)
    api = docker_api(sb)
    wait_until("no container of the job", lambda: not job_containers(api, job), 60)
    wait_until("the helper's end", lambda: not Path(f"/proc/{helper}").exists(), 30)
    assert not (scripts / mark).exists(), "the user's command ran"
    node = sb.run_slurm(["scontrol", "show", "node", "-o"]).stdout
    assert "DRAIN" not in node, node
