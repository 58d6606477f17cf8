"""The GPU fence on the sandbox (``sandbox up`` installs it: device files 0660 root:root,
``gpu_fence`` on): a user opens a GPU's device file only while a job of theirs holds it.

An emulated GPU has no driver: an open that passes the permission check fails with
ENXIO, one that does not with EACCES. That is how these tests tell "allowed" from
"refused", as user1 and user2, in and out of real jobs.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sandboxtest import IMAGE, submit, wait_gone, wait_job, wait_until

from acbslurm.config import load_settings
from acbslurm.gpu.acl import Acl
from acbslurm.gpu.fence import read_acl, write_acl
from acbslurm.jobrecord import read_record, record_path

pytestmark = pytest.mark.integration

# Opens each file read-write; prints {path: "ok" | errno name}.
PROBE = (
    "import errno, json, os, sys\n"
    "out = {}\n"
    "for p in sys.argv[1:]:\n"
    "    try:\n"
    "        os.close(os.open(p, os.O_RDWR)); out[p] = 'ok'\n"
    "    except OSError as e:\n"
    "        out[p] = errno.errorcode[e.errno]\n"
    "print(json.dumps(out))\n"
)


def gpu_files(sb: Any) -> list[str]:
    return [g.device for g in sb.gpus]


def opens(sb: Any, user: str, files: list[str]) -> dict[str, str]:
    """What ``user`` gets opening each file read-write, outside any job."""
    r = sb.run_as(user, [sys.executable, "-c", PROBE, *files], check=False, timeout=30)
    assert r.returncode == 0, r.stderr
    got: dict[str, str] = json.loads(r.stdout)
    return got


def job_gpu(sb: Any, job: str) -> str:
    """The device file of the job's one GPU, once its prolog has recorded it."""
    rec = wait_until(f"job {job}'s record", lambda: read_record(settings(sb).record_dir, job), 30)
    (gpu,) = rec.gpus
    return next(g.device for g in sb.gpus if g.minor == gpu.minor)


def settings(sb: Any) -> Any:
    return load_settings(str(sb.layout.acbslurm_conf))


def submit_as(sb: Any, user: str, scripts: Path, body: str) -> str:
    script = scripts / f"fence-{user}-{os.urandom(4).hex()}.sh"
    script.write_text("#!/bin/bash\n" + body + "\n")
    script.chmod(0o755)
    argv = ["sbatch", "--parsable", "--gres=gpu:1", "-o", f"{scripts}/out-%j.txt", str(script)]
    return str(sb.run_as(user, argv, timeout=30).stdout.strip().split(";")[0])


def test_the_sandbox_installs_the_fence(sb: Any) -> None:
    assert settings(sb).gpu_fence
    for dev in gpu_files(sb):
        st = os.stat(dev)
        assert (st.st_uid, st.st_gid, st.st_mode & 0o7) == (0, 0, 0), dev


def test_outside_any_job_no_user_opens_a_gpu(idle: Any) -> None:
    files = gpu_files(idle)
    for user in ("user1", "user2"):
        assert opens(idle, user, files) == dict.fromkeys(files, "EACCES"), user


def test_each_job_opens_its_own_gpu_and_no_other(idle: Any, scripts: Path) -> None:
    sb = idle
    files = gpu_files(sb)
    # Inside the job: its own GPU passes the check (ENXIO), the other one does not.
    probe = shlex.join([sys.executable, "-c", PROBE, *files])
    job1 = submit(sb, scripts, f"{probe}\nexec sleep 300", "--gres=gpu:1")
    wait_job(sb, job1, ("RUNNING",), 60)
    mine = job_gpu(sb, job1)
    other = next(f for f in files if f != mine)
    out = scripts / f"out-{job1}.txt"
    seen = wait_until("the job's probe", lambda: out.exists() and out.read_text().strip(), 30)
    assert json.loads(seen) == {mine: "ENXIO", other: "EACCES"}
    # user2's job on the same node gets the other GPU, and never user1's.
    job2 = submit_as(sb, "user2", scripts, "exec sleep 300")
    wait_job(sb, job2, ("RUNNING",), 60)
    assert job_gpu(sb, job2) == other
    uid2 = pwd.getpwnam("user2").pw_uid
    wait_until("user2's prolog to fence", lambda: read_acl(other).user_perm(uid2) == 6, 30)
    assert opens(sb, "user2", files) == {mine: "EACCES", other: "ENXIO"}
    assert opens(sb, "user1", files) == {mine: "ENXIO", other: "EACCES"}
    # user1's job ends: its access goes, user2's stays.
    sb.run_slurm(["scancel", job1])
    wait_gone(sb, job1)
    assert opens(sb, "user1", files) == dict.fromkeys(files, "EACCES")
    assert opens(sb, "user2", files) == {mine: "EACCES", other: "ENXIO"}
    sb.run_slurm(["scancel", job2])
    wait_gone(sb, job2)
    assert opens(sb, "user2", files) == dict.fromkeys(files, "EACCES")


def test_a_next_prolog_closes_what_a_killed_epilog_left_open(idle: Any, scripts: Path) -> None:
    """An epilog killed before it reconciled leaves the job's record and its user's ACL
    entry behind (planted here as it would have left them). The next job's prolog on the
    node finds no slurmstepd of that job and slurmctld not running it: the entry goes."""
    sb = idle
    job1 = submit(sb, scripts, "exec sleep 300", "--gres=gpu:1")
    wait_job(sb, job1, ("RUNNING",), 60)
    gpu = job_gpu(sb, job1)
    record = Path(record_path(settings(sb).record_dir, job1)).read_bytes()
    sb.run_slurm(["scancel", job1])
    wait_gone(sb, job1)
    uid1 = sb.uid
    Path(record_path(settings(sb).record_dir, job1)).write_bytes(record)
    os.chmod(record_path(settings(sb).record_dir, job1), 0o644)
    write_acl(gpu, read_acl(gpu).with_users({uid1: 6}))
    assert opens(sb, "user1", [gpu]) == {gpu: "ENXIO"}  # the hole a killed epilog leaves
    job2 = submit_as(sb, "user2", scripts, "exec sleep 300")
    job_gpu(sb, job2)  # its prolog ran (Slurm may call the job RUNNING before)
    wait_until("user1's entry to go", lambda: read_acl(gpu).user_perm(uid1) == 0, 30)
    assert opens(sb, "user1", [gpu]) == {gpu: "EACCES"}
    sb.run_slurm(["scancel", job2])
    wait_gone(sb, job2)
    os.unlink(record_path(settings(sb).record_dir, job1))
    for dev in gpu_files(sb):
        assert read_acl(dev).users == (), dev


# A process that names itself slurmstepd (comm) under slurmstepd's title (argv[0]): what
# any user can start.
FAKE_STEPD = (
    "import time\n"
    "open('/proc/self/comm', 'w').write('slurmstepd')\n"
    "print('up', flush=True)\n"
    "time.sleep(300)\n"
)


def test_a_users_fake_slurmstepd_keeps_no_gpu_open(idle: Any, scripts: Path) -> None:
    """As above, and user1 runs a process titled ``slurmstepd: [JOB.0]`` for the dead
    job, so that the fence would take the job for alive and keep the GPU theirs. Only
    root's slurmstepd counts: the entry goes all the same."""
    sb = idle
    job1 = submit(sb, scripts, "exec sleep 300", "--gres=gpu:1")
    wait_job(sb, job1, ("RUNNING",), 60)
    gpu = job_gpu(sb, job1)
    path = record_path(settings(sb).record_dir, job1)
    record = Path(path).read_bytes()
    sb.run_slurm(["scancel", job1])
    wait_gone(sb, job1)
    uid1 = sb.uid
    fake = subprocess.Popen(
        [f"slurmstepd: [{job1}.0]", "-c", FAKE_STEPD],
        executable=os.path.realpath(sys.executable),
        user=uid1,
        group=pwd.getpwuid(uid1).pw_gid,
        extra_groups=[],
        cwd="/",
        stdout=subprocess.PIPE,
    )
    try:
        assert fake.stdout is not None and fake.stdout.readline() == b"up\n"
        Path(path).write_bytes(record)
        os.chmod(path, 0o644)
        write_acl(gpu, read_acl(gpu).with_users({uid1: 6}))
        job2 = submit_as(sb, "user2", scripts, "exec sleep 300")
        job_gpu(sb, job2)
        wait_until("user1's entry to go", lambda: read_acl(gpu).user_perm(uid1) == 0, 30)
        assert opens(sb, "user1", [gpu]) == {gpu: "EACCES"}
        assert fake.poll() is None  # it ran the whole time
        sb.run_slurm(["scancel", job2])
        wait_gone(sb, job2)
    finally:
        fake.kill()
        fake.wait(10)
        if fake.stdout is not None:
            fake.stdout.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    for dev in gpu_files(sb):
        assert read_acl(dev).users == (), dev


def test_a_user_without_docker_leaves_nothing_unswept(idle: Any, scripts: Path) -> None:
    """user2 has no Docker daemon: each of its jobs' epilogs used to warn and add the job
    to unswept/<uid>, which nothing ever emptied (5 jobs, 5 lines)."""
    sb = idle
    uid2 = pwd.getpwnam("user2").pw_uid
    unswept = Path(settings(sb).record_dir) / "unswept" / str(uid2)
    jobs = [submit_as(sb, "user2", scripts, "true") for _ in range(5)]
    for job in jobs:
        wait_gone(sb, job)
    assert not unswept.exists(), unswept.read_text()


def test_the_acl_codec_reads_what_the_sandbox_wrote(idle: Any) -> None:
    for dev in gpu_files(idle):
        assert read_acl(dev) == Acl(6, 6, 0)


def test_a_rootless_containers_root_opens_the_jobs_gpu_an_image_user_does_not(
    idle: Any, scripts: Path
) -> None:
    """A rootless container's root is the job's user on the host: the ACL entry covers
    it. A non-root image user is one of the user's subuids: the fence keeps it out (the
    limit docs/admin-guide.md states)."""
    sb = idle
    job = submit(sb, scripts, "exec sleep 300", "--gres=gpu:1")
    gpu = job_gpu(sb, job)
    other = next(f for f in gpu_files(sb) if f != gpu)
    wait_until("the job's grant", lambda: read_acl(gpu).user_perm(sb.uid) == 6, 30)

    def in_container(dev: str, *user: str) -> str:
        argv = ["docker", "run", "--rm", f"--device={dev}", *user, IMAGE]
        r = sb.run_as_user([*argv, "sh", "-c", f": <> {dev}"], check=False, timeout=60)
        return str(r.stderr.strip().rpartition(": ")[2])

    assert in_container(gpu) == "No such device or address"
    assert in_container(gpu, "--user", "1000:1000") == "Permission denied"
    assert in_container(other) == "Permission denied"
    sb.run_slurm(["scancel", job])
    wait_gone(sb, job)
