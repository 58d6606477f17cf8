"""The container is the job's: with ``container_cgroups: join`` (the sandbox's setting, as
a GPU site's with Slurm's cgroup plugins) a job's container runs inside the cgroups of
the job step that started it, so Slurm's own memory limit, device rules and accounting
hold it with no code of acbslurm in the way. Run as user1 on the real sandbox.

An emulated GPU has no driver: an open that passes every check fails with ENXIO ("No
such device or address"); one Slurm's device cgroup refuses fails with EPERM
("Operation not permitted").
"""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path
from typing import Any

import pytest
from sandboxtest import (
    IMAGE,
    acbslurm_as,
    acbslurm_run,
    job_status,
    submit,
    wait_gone,
    wait_job,
    wait_until,
)

from acbslurm.config import load_settings
from acbslurm.jobrecord import read_record

pytestmark = pytest.mark.integration

ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL")
# The hierarchies Slurm's cgroup plugins constrain or track (cgroup v1, the sandbox's).
SLURMS = ("freezer", "memory", "devices", "cpuset", "cpuacct")


def cgroups(text: str) -> dict[str, str]:
    """/proc/PID/cgroup text -> {controllers: path}."""
    out = {}
    for line in text.splitlines():
        _, ctrl, path = line.split(":", 2)
        out[ctrl] = path
    return out


def settings(sb: Any) -> Any:
    return load_settings(str(sb.layout.acbslurm_conf))


def job_gpu_file(sb: Any, job: str) -> str:
    rec = wait_until(f"job {job}'s record", lambda: read_record(settings(sb).record_dir, job), 30)
    return next(g.device for g in sb.gpus if g.minor == rec.gpus[0].minor)


def finished(sb: Any, job: str, timeout: float = 90) -> str:
    return str(wait_job(sb, job, ENDED, timeout)["JobState"])


def test_the_container_runs_in_its_job_steps_cgroups_whatever_its_user(
    idle: Any, scripts: Path
) -> None:
    """The container's processes, as the image's root and as a non-root user, are in
    the cgroups of the step that ran `acbslurm run` (the batch step's task here), and
    Slurm's device rules apply in it: its own GPU opens (ENXIO), the GPU of another job
    on the node does not (EPERM), though the fence lets user1 open both (both jobs are
    user1's)."""
    sb = idle
    other = submit(sb, scripts, "exec sleep 300", "--gres=gpu:1")
    other_gpu = job_gpu_file(sb, other)
    tag = os.urandom(4).hex()
    devs = str(sb.layout.dev)
    probe = (
        "cat /proc/self/cgroup > /out/cg-$1-" + tag + "; "
        "for f in /gpus/nvidia*; do (: <> $f) 2> /out/open-$1-$(basename $f)-"
        + tag
        + "; done; true"
    )
    mounts = ("--mount", f"{scripts}:/out", "--mount", f"{devs}:/gpus")
    as_root = acbslurm_run(*mounts, IMAGE, "sh", "-c", probe, "-", "root")
    as_user = acbslurm_run(*mounts, "--user", "1000:1000", IMAGE, "sh", "-c", probe, "-", "nobody")
    body = f"cat /proc/self/cgroup > {scripts}/cg-shell-{tag}\n{as_root}\n{as_user}\n"
    job = submit(sb, scripts, body, "--gres=gpu:1")
    mine = job_gpu_file(sb, job)
    state = finished(sb, job)
    out = (scripts / f"out-{job}.txt").read_text()
    assert state == "COMPLETED", out
    shell = cgroups((scripts / f"cg-shell-{tag}").read_text())
    for who in ("root", "nobody"):
        seen = cgroups((scripts / f"cg-{who}-{tag}").read_text())
        for ctrl in SLURMS:
            assert f"/job_{job}/" in seen[ctrl], (who, seen)
            assert seen[ctrl] == shell[ctrl], (who, ctrl, seen, shell)
    opened = {
        name: (scripts / f"open-root-{Path(name).name}-{tag}").read_text()
        for name in (mine, other_gpu)
    }
    assert "No such device or address" in opened[mine], opened
    assert "Operation not permitted" in opened[other_gpu], opened
    sb.run_slurm(["scancel", other])
    wait_gone(sb, other)


def test_the_jobs_memory_limit_stops_its_container(idle: Any, scripts: Path) -> None:
    """A container past the job's --mem is killed by the job's own cgroup (the OOM
    killer), and Slurm, `acbslurm status` and `acbslurm report` say OUT_OF_MEMORY."""
    sb = idle
    body = "exec " + acbslurm_run(IMAGE, "sh", "-c", "head -c 800000000 /dev/zero | tail; echo ran")
    job = submit(sb, scripts, body, "--gres=gpu:1", "--mem=200M")
    state = finished(sb, job)
    out = (scripts / f"out-{job}.txt").read_text()
    assert state == "OUT_OF_MEMORY", out
    assert "oom-kill" in out or "Killed" in out, out
    wait_gone(sb, job)
    assert job_status(sb, "user1", job)["state"] == "OUT_OF_MEMORY"

    def reported() -> str:
        res = acbslurm_as(sb, "user1", "report", "--format", "json", "--start", "now-1h")
        assert res.returncode == 0, res.stderr
        rows = [j for j in json.loads(res.stdout)["jobs"] if str(j["job_id_raw"]) == job]
        return str(rows[0]["state"]) if rows else ""

    # The report reads slurmdbd's database, which gets the job's end a moment later.
    wait_until(f"job {job} in the report", lambda: reported() == "OUT_OF_MEMORY", 60)


def test_a_container_step_out_of_memory_makes_its_failed_job_out_of_memory(
    idle: Any, scripts: Path
) -> None:
    """As a rendered job script runs it (`exec srun acbslurm run`): the container's step
    is OOM-killed and OUT_OF_MEMORY, the job itself FAILED (the batch script's exit, from
    srun); `acbslurm status` says OUT_OF_MEMORY, from the steps sacct lists."""
    sb = idle
    run = acbslurm_run(IMAGE, "sh", "-c", "head -c 800000000 /dev/zero | tail")
    job = submit(sb, scripts, f"exec srun {run}", "--gres=gpu:1", "--mem=200M")
    state = finished(sb, job)
    out = (scripts / f"out-{job}.txt").read_text()
    assert state == "FAILED" and "Out Of Memory" in out, (state, out)
    # slurmdbd has the steps a moment after slurmctld ends the job
    wait_until(
        f"job {job} OUT_OF_MEMORY in `acbslurm status`",
        lambda: job_status(sb, "user1", job)["state"] == "OUT_OF_MEMORY",
        60,
    )


def _seconds(text: str) -> float:
    """sacct's TotalCPU: [[DD-]HH:]MM:SS[.mmm]."""
    days, _, rest = text.strip().rpartition("-")
    parts = [float(p) for p in rest.split(":")]
    total = 0.0
    for p in parts:
        total = total * 60 + p
    return total + (int(days) * 86400 if days else 0)


def _kib(text: str) -> float:
    """sacct's MaxRSS (``61234K``, ``58M``, ``0``) in KiB."""
    m = re.match(r"^([0-9.]+)([KMGT]?)$", text.strip())
    assert m, text
    return float(m[1]) * 1024 ** " KMGT".index(m[2] or " ") / 1024


def busy_loop(cpu_seconds: float) -> str:
    """A shell command for the container: a busy loop that ends once it has used
    ``cpu_seconds`` of CPU, as its own /proc stat counts (utime + stime, in USER_HZ
    ticks, 100 on Linux). Not a wall time: on a loaded machine a loop gets a fraction
    of a CPU, and what the step must show is CPU time."""
    ticks = round(cpu_seconds * 100)
    return (
        "sh -c 'while read -r _ _ _ _ _ _ _ _ _ _ _ _ _ u s _ < /proc/$$/stat; "
        f"[ $((u + s)) -lt {ticks} ]; do :; done'"
    )


# What the step's CPU must reach: the container's loop, as `acbslurm run` itself uses
# well under one second. The loop runs past it: the step's count moves in whole
# seconds of user and of system time (2.10-2.18 s for loops of 2.2 s by their own
# stat, 3.10-3.17 s for 2.5 s), each short by under 1 s, so a loop of CPU_FLOOR + 1 s
# shows at least CPU_FLOOR.
CPU_FLOOR = 2.0
LOOP_CPU = CPU_FLOOR + 1.0


def test_sacct_counts_the_containers_cpu_time_and_memory(idle: Any, scripts: Path) -> None:
    """The container's CPU time and memory are the step's: sacct's TotalCPU of the step
    that ran `acbslurm run` holds the container's busy loop (LOOP_CPU of CPU, however
    long that takes), its MaxRSS the 60 MB string the container's shell held for 4 s
    (sampled each second: ``--acctg-freq=1``; the sandbox's JobAcctGatherFrequency is
    30)."""
    sb = idle
    work = (
        busy_loop(LOOP_CPU)
        + " & x=$(head -c 60000000 /dev/zero | tr '\\0' a); sleep 4; wait; echo held ${#x}"
    )
    body = "exec srun " + acbslurm_run(IMAGE, "sh", "-c", work)
    job = submit(sb, scripts, body, "--gres=gpu:1", "--acctg-freq=1")
    out = scripts / f"out-{job}.txt"
    assert finished(sb, job) == "COMPLETED", out.read_text()
    assert "held 60000000" in out.read_text(), out.read_text()

    def step(field: str) -> str:
        res = sb.run_slurm(["sacct", "-n", "-P", "-j", f"{job}.0", "-o", field], check=False)
        return (res.stdout.strip().splitlines() or [""])[0]

    def step_cpu() -> float:
        out = step("TotalCPU")
        return _seconds(out) if re.match(r"^[0-9:.-]+$", out or "x") else 0.0

    assert wait_until(f"step {job}.0's TotalCPU", lambda: step_cpu() >= CPU_FLOOR, 60)
    # The string alone is 57 MiB; acbslurm run's own Python is about 30 MB.
    assert _kib(step("MaxRSS") or "0") >= 50 * 1024, step("MaxRSS")


def test_sstat_sees_the_running_containers_memory_and_cpu(idle: Any, scripts: Path) -> None:
    """While the container runs, `sstat` (the job's user's, as users run it) counts its
    memory and CPU as the step's: the 60 MB string its shell holds and its busy loop
    (LOOP_CPU of CPU), sampled each second (``--acctg-freq=1``)."""
    sb = idle
    work = (
        "x=$(head -c 60000000 /dev/zero | tr '\\0' a); "
        + busy_loop(LOOP_CPU)
        + "; echo busy-done; sleep 300"
    )
    body = "exec srun " + acbslurm_run(IMAGE, "sh", "-c", work)
    job = submit(sb, scripts, body, "--gres=gpu:1", "--acctg-freq=1")
    out = scripts / f"out-{job}.txt"
    wait_until(
        "the container's busy loop to end",
        lambda: out.exists() and "busy-done" in out.read_text(),
        90,
    )

    def sstat() -> tuple[float, float]:
        res = sb.run_as_user(
            ["sstat", "-n", "-P", "-j", f"{job}.0", "-o", "MaxRSS,AveCPU"], check=False
        )
        line = (res.stdout.strip().splitlines() or ["|"])[0]
        rss, _, cpu = line.partition("|")
        ok = re.match(r"^[0-9:.-]+$", cpu or "x")
        return _kib(rss or "0"), (_seconds(cpu) if ok else 0.0)

    # The string alone is 57 MiB; acbslurm run's own Python is about 30 MB.
    wait_until(
        f"sstat of step {job}.0 to count the container",
        lambda: (lambda got: got[0] >= 50 * 1024 and got[1] >= CPU_FLOOR)(sstat()),
        60,
    )
    sb.run_slurm(["scancel", job])
    wait_gone(sb, job)


def test_every_process_the_container_forks_at_once_is_in_the_job(idle: Any, scripts: Path) -> None:
    """A container that forks 100 processes the moment it starts: every process of its
    pid namespace is in the job step's cgroups (the move came before anything of the
    user's ran, so nothing it forked was left behind)."""
    from sandboxtest import container_job, docker_api

    sb = idle
    run = acbslurm_run(IMAGE, "sh", "-c", "for i in $(seq 100); do sleep 300 & done; wait")
    api = docker_api(sb)
    job, running = container_job(sb, api, scripts, "exec srun " + run)
    init = int(api.inspect_container(running["Id"])["State"]["Pid"])
    space = os.readlink(f"/proc/{init}/ns/pid")
    main = cgroups(Path(f"/proc/{init}/cgroup").read_text())

    def members() -> list[str]:
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                if os.readlink(f"/proc/{entry}/ns/pid") == space:
                    found.append(Path(f"/proc/{entry}/cgroup").read_text())
            except OSError:
                continue  # gone meanwhile
        return found

    seen = wait_until(
        "the container's 100 processes", lambda: (m := members()) and len(m) > 100 and m, 60
    )
    for text in seen:
        got = cgroups(text)
        for ctrl in SLURMS:
            assert got[ctrl] == main[ctrl] and f"/job_{job}/" in got[ctrl], (ctrl, got)
    sb.run_slurm(["scancel", job])
    wait_gone(sb, job)


def test_suspend_freezes_the_container_through_slurms_freezer(idle: Any, scripts: Path) -> None:
    """`scontrol suspend` freezes the step's freezer cgroup, and the container's
    processes are in it; `resume` thaws them."""
    from sandboxtest import docker_api, wait_container

    sb = idle
    job = submit(sb, scripts, "exec srun " + acbslurm_run(IMAGE, "sleep", "300"), "--gres=gpu:1")
    wait_job(sb, job, ("RUNNING",), 60)
    api = docker_api(sb)
    pid = int(api.inspect_container(wait_container(api, job)["Id"])["State"]["Pid"])
    freezer = cgroups(Path(f"/proc/{pid}/cgroup").read_text())["freezer"]
    assert f"/job_{job}/" in freezer
    state = Path("/sys/fs/cgroup/freezer") / freezer.lstrip("/") / "freezer.state"
    sb.run_slurm(["scontrol", "suspend", job])
    wait_until("the container frozen", lambda: state.read_text().strip() == "FROZEN", 30)
    sb.run_slurm(["scontrol", "resume", job])
    wait_until("the container thawed", lambda: state.read_text().strip() == "THAWED", 30)
    sb.run_slurm(["scancel", job])
    wait_gone(sb, job)


def test_what_is_execd_into_the_container_runs_in_the_job_too(idle: Any, scripts: Path) -> None:
    """`docker exec` into a job's running container (user1's own daemon, as the user
    would): the exec'd process is born in the cgroups of the step that runs the
    container, and Slurm's device rules hold it: the job's GPU opens (ENXIO), the GPU
    of another job on the node does not (EPERM)."""
    from sandboxtest import container_job, docker_api

    sb = idle
    other = submit(sb, scripts, "exec sleep 300", "--gres=gpu:1")
    other_gpu = job_gpu_file(sb, other)
    run = acbslurm_run("--mount", f"{sb.layout.dev}:/gpus", IMAGE, "sleep", "300")
    api = docker_api(sb)
    job, running = container_job(sb, api, scripts, "exec srun " + run)
    container = running["Id"]
    mine = job_gpu_file(sb, job)
    main_pid = int(api.inspect_container(container)["State"]["Pid"])
    main = cgroups(Path(f"/proc/{main_pid}/cgroup").read_text())
    probe = 'cat /proc/self/cgroup; for f in /gpus/nvidia*; do echo "$f: $( (: <> $f) 2>&1)"; done'
    out = api.exec_start(api.exec_create(container, ["sh", "-c", probe])["Id"]).decode()
    lines = out.splitlines()
    seen = cgroups("\n".join(x for x in lines if re.match(r"^[0-9]+:", x)))
    for ctrl in SLURMS:
        assert f"/job_{job}/" in seen[ctrl], (ctrl, out)
        assert seen[ctrl] == main[ctrl], (ctrl, seen, main)
    opened = {x.split(": ", 1)[0]: x for x in lines if x.startswith("/gpus/")}
    assert "No such device or address" in opened[f"/gpus/{Path(mine).name}"], out
    assert "Operation not permitted" in opened[f"/gpus/{Path(other_gpu).name}"], out
    sb.run_slurm(["scancel", job, other])
    wait_gone(sb, job)
    wait_gone(sb, other)


def _running(api: Any, container: str) -> bool:
    import docker

    try:
        return bool(api.inspect_container(container)["State"]["Running"])
    except docker.errors.NotFound:
        return False


def test_slurms_end_of_step_kill_reaches_the_container(idle: Any, scripts: Path) -> None:
    """`acbslurm run` killed outright (SIGKILL: it cannot stop its container): its step
    ends, and Slurm's own kill of what is left in the step's cgroups ends the
    container, while the job runs on (the epilog's sweep, the safety net, has not run
    yet)."""
    from sandboxtest import container_job, docker_api

    sb = idle
    go = scripts / f"go-{os.urandom(4).hex()}"
    run = acbslurm_run(IMAGE, "sleep", "300")
    body = f"srun {run}\necho step-rc=$?\nwhile [ ! -e {go} ]; do sleep 0.2; done\n"
    api = docker_api(sb)
    job, running = container_job(sb, api, scripts, body)
    container = running["Id"]
    env = dict(e.split("=", 1) for e in api.inspect_container(container)["Config"]["Env"])
    run_pid = int(env["ACBSLURM_RUN_PID"])
    assert "acbslurm" in Path(f"/proc/{run_pid}/cmdline").read_text()
    os.kill(run_pid, signal.SIGKILL)
    out = scripts / f"out-{job}.txt"
    wait_until("the step's end", lambda: "step-rc=" in out.read_text(), 60)
    wait_until("the container's end", lambda: not _running(api, container), 30)
    assert wait_job(sb, job, ("RUNNING",), 5)["JobState"] == "RUNNING"
    go.touch()
    assert finished(sb, job) == "COMPLETED", out.read_text()
    wait_gone(sb, job)
