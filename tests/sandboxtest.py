"""Helpers for tests on the real sandbox (tests/integration, tests/faults): submit a job
as the sandbox user, wait for states, list a job's containers in user1's real daemon."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from acbslurm.sandbox.slurm import slurm_env
from acbslurm.slurm.jobs import cancel_and_wait

REPO = Path(__file__).resolve().parents[1]
IMAGE = "acbslurm/busybox:latest"
# The 2-node sandbox (conftest.py's ``two``): nodes, and emulated GPUs on each.
TWO_NODES, TWO_NODES_GPUS = 2, 2


def requested_install(log: Any) -> Any:
    """The Slurm the test run asked for: ACBSLURM_SANDBOX_SLURM (`make test
    SLURM=25.11.7`) or ACBSLURM_SANDBOX_SLURM_PREFIX; None: the sandbox's last, else
    Debian's."""
    from acbslurm.sandbox.slurmbuild import choose_install

    return choose_install(
        os.environ.get("ACBSLURM_SANDBOX_SLURM") or None,
        os.environ.get("ACBSLURM_SANDBOX_SLURM_PREFIX") or None,
        None,
        log,
    )


def requested_docker(log: Any) -> Any:
    """The Docker the test run asked for: ACBSLURM_SANDBOX_DOCKER (`make test
    DOCKER=28.5`); None: the sandbox's last, else the host's 20.10."""
    from acbslurm.sandbox.dockerbuild import ensure_fetched

    version = os.environ.get("ACBSLURM_SANDBOX_DOCKER") or None
    return ensure_fetched(version, log) if version else None


def no_jobs(sb: Any, timeout: float = 60) -> None:
    """Cancel every job (user1's and user2's) and wait until none is queued, running or
    completing: a test that takes all GPUs must find them free.

    (Not ``sb.wait_idle``: ``sinfo -o %T`` reports a node "mixed" for up to a minute
    after a GPU job ended, while slurmctld already calls it IDLE.)
    """
    cancel_and_wait(env={**slurm_env(sb.layout), **sb.env()}, timeout=timeout)


# CI's package leg (ACBSLURM_INSTALLED=1, docs/sandbox.md): the commands users and jobs
# run are the installed Debian package's, /usr/bin/acbslurm; else this checkout's.
INSTALLED = os.environ.get("ACBSLURM_INSTALLED", "") not in ("", "0")
ACBSLURM = ["/usr/bin/acbslurm"] if INSTALLED else [sys.executable, "-m", "acbslurm"]
# `acbslurm serve` needs the serve extras, which the package does not carry: on it, pool
# jobs run the venv's acbslurm, as a site runs pools from a venv (admin-guide.md).
POOL_SUBMIT = ["--acbslurm", str(Path(sys.executable).parent / "acbslurm")] if INSTALLED else []


def acbslurm_run(*args: str) -> str:
    """The command line a rendered job script uses, for this checkout (or the package)."""
    from shlex import join

    return join([*ACBSLURM, "run", *args])


def submit(sb: Any, scripts: Path, body: str, *sbatch: str) -> str:
    script = scripts / f"job-{time.monotonic_ns()}.sh"
    script.write_text("#!/bin/bash\n" + body + "\n")
    script.chmod(0o755)
    res = sb.run_as_user(
        ["sbatch", "--parsable", "-o", f"{scripts}/out-%j.txt", *sbatch, str(script)],
        extra_env={"PYTHONPATH": str(REPO)},
    )
    return str(res.stdout.strip().split(";")[0])


def job_fields(sb: Any, job_id: str) -> dict[str, str]:
    out = sb.run_slurm(["scontrol", "show", "job", "-o", job_id]).stdout
    return dict(t.partition("=")[::2] for t in out.split() if "=" in t)


def wait_job(sb: Any, job_id: str, states: tuple[str, ...], timeout: float) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        f = job_fields(sb, job_id)
        if f.get("JobState") in states:
            return f
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} not in {states} after {timeout} s: {f.get('JobState')}")


def reach_time_limit(sb: Any, job_id: str, after: int = 2) -> None:
    """The running job's time limit, ended ``after`` s from now (``scontrol update
    EndTime=``, which shortens a running job's limit): Slurm then ends it as at any
    limit (TIMEOUT, SIGTERM, KillWait, SIGKILL) at its next time-limit check, which runs
    every 30 s. A ``--time=1`` job waits a minute and that check (60-90 s in all)."""
    sb.run_slurm(["scontrol", "update", f"jobid={job_id}", f"EndTime=now+{after}"])


def docker_api(sb: Any) -> Any:
    import docker

    return docker.APIClient(base_url=sb.env()["DOCKER_HOST"], timeout=10)


def job_containers(api: Any, job_id: str) -> list[dict[str, Any]]:
    return list(api.containers(all=True, filters={"label": f"acbslurm.job_id={job_id}"}))


def wait_container(api: Any, job_id: str, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = [c for c in job_containers(api, job_id) if c["State"] == "running"]
        if running:
            return running[0]
        time.sleep(0.1)
    raise AssertionError(f"no running container for job {job_id}")


def container_job(sb: Any, api: Any, scripts: Path, body: str) -> tuple[str, dict[str, Any]]:
    """A one-GPU job running ``body`` (an `acbslurm run` in it): its id and its container,
    once the job is RUNNING and the container runs."""
    job = submit(sb, scripts, body, "--gres=gpu:1")
    wait_job(sb, job, ("RUNNING",), 60)
    return job, wait_container(api, job)


def hook_records_by_container(sb: Any) -> dict[str, dict[str, Any]]:
    """container id -> the stand-in hook's record (``via``: nvidia for `--gpus`, cdi
    when the sandbox's CDI spec ran it)."""
    return {r["container"]: r for r in sb.hook_records()}


def hook_devices(sb: Any) -> dict[str, list[str]]:
    """container id -> the GPU UUIDs Docker handed to the NVIDIA hook."""
    return {r["container"]: [d for d in r["devices"].split(",") if d] for r in sb.hook_records()}


def dockerd_pid(sb: Any) -> int:
    """The sandbox user's dockerd of THIS sandbox (another sandbox may run one for the same
    user): the one serving this sandbox's socket."""
    host = f"--host={sb.env()['DOCKER_HOST']}"
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            comm = Path(f"/proc/{entry}/comm").read_text().strip()
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().decode().split("\0")
        except OSError:
            continue
        if comm == "dockerd" and host in argv:
            return int(entry)
    raise AssertionError(f"no dockerd with {host} runs")


def acbslurm_as(
    sb: Any, user: str, *argv: str, cwd: str | Path | None = None, timeout: float = 60.0
) -> Any:
    """``acbslurm ARGV`` run by ``user`` with this checkout's code; its exit status is
    the test's to check."""
    kw: dict[str, Any] = {"check": False, "extra_env": {"PYTHONPATH": str(REPO)}}
    if cwd:
        kw["cwd"] = str(cwd)
    return sb.run_as(user, [*ACBSLURM, *argv], timeout=timeout, **kw)


def report_json(sb: Any, *args: str) -> dict[str, Any]:
    """``acbslurm report --format json ARGS`` as root (every user's rows), which must succeed."""
    env = {**os.environ, **sb.env(), "PYTHONPATH": str(REPO)}
    res = subprocess.run(
        [*ACBSLURM, "report", "--format", "json", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    doc: dict[str, Any] = json.loads(res.stdout)
    return doc


def job_status(sb: Any, user: str, job_id: str) -> dict[str, Any]:
    """The job's row of ``acbslurm status --json`` run by ``user`` (which must succeed)."""
    res = acbslurm_as(sb, user, "status", "--json", job_id)
    assert res.returncode == 0, res.stderr
    return dict(json.loads(res.stdout)["jobs"][0])


def job_state(sb: Any, job_id: str) -> str:
    """scontrol's JobState of the job ("" once slurmctld no longer knows it)."""
    out = sb.run_slurm(["scontrol", "-o", "show", "job", job_id], check=False).stdout
    return next((f[9:] for f in out.split() if f.startswith("JobState=")), "")


def wait_for_pool(sb: Any, job_id: str, out: Path, timeout: float) -> dict[str, Any]:
    """A pool job's ``serve`` field of ``acbslurm status`` (user1's) once its gateway is
    up; AssertionError with the job's output when it ends first or after ``timeout``."""

    def log() -> str:
        return out.read_text() if out.exists() else "(no output yet)"

    def ready() -> dict[str, Any] | None:
        row = job_status(sb, "user1", job_id)
        if row["state"] not in ("PENDING", "CONFIGURING", "RUNNING"):
            raise AssertionError(f"job {job_id} {row['state']}:\n{log()}")
        return row["serve"]  # type: ignore[no-any-return]

    try:
        return dict(wait_until(f"job {job_id}'s address", ready, timeout))
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{log()}") from None


def pool_key(pool: dict[str, Any]) -> str:
    """The key in a pool job's key file (docs/serve.md, *Keys*), read as root: the file
    its address names, made for the job when its pool names none; private to its user."""
    path = Path(pool["api_keys"])
    assert path.stat().st_mode & 0o077 == 0, f"{path} is readable by others"
    return path.read_text().split()[-1]


def wait_until(what: str, cond: Any, timeout: float = 60) -> Any:
    """``cond()``'s first true value, asked every 0.2 s; AssertionError naming ``what``
    after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (got := cond()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not after {timeout} s")
        time.sleep(0.2)
    return got


def wait_gone(sb: Any, job_id: str, timeout: float = 60) -> None:
    """Until ``squeue`` no longer lists the job: it ended and slurmctld heard that its
    epilog finished (a job stays COMPLETING while it runs, on 25.11 also after its end
    state is set), so what the epilog removes is gone."""
    wait_until(
        f"job {job_id} to leave the queue",
        lambda: not sb.run_slurm(["squeue", "-h", "-j", job_id], check=False).stdout.strip(),
        timeout,
    )


# s: how long a requeued job waits before it may start again on the sandbox (its
# slurm.conf's AuthInfo cred_expire), plus the scheduler's passes: it starts on its own.
RERUN_WAIT = 90


def wait_for_pool_usage(sb: Any, job_id: str, timeout: float = 60) -> dict[str, Any]:
    """The ``pool`` of ``job_id``'s row in user1's `acbslurm report --json` (what the
    job's epilog kept of its pool's or broker's usage), once it is there."""

    def pool() -> dict[str, Any] | None:
        res = acbslurm_as(sb, "user1", "report", "--json", "--start", "now-1h")
        assert res.returncode == 0, res.stderr
        rows = [j for j in json.loads(res.stdout)["jobs"] if j["job_id"] == job_id]
        return rows[0]["pool"] if rows and rows[0]["pool"] else None

    got: dict[str, Any] = wait_until(f"job {job_id}'s usage in the report", pool, timeout)
    return got


# A job's broker started as docs/broker.md shows (the job's socket), waited for; then
# programs that each hold a lease: `broker_program(name, gpus, seconds[, marker])`.
_ACB = shlex.join(ACBSLURM)
_PY = "PYTHONPATH=/usr/lib/acbslurm /usr/bin/python3" if INSTALLED else shlex.quote(sys.executable)
_PROGRAM = (
    "import sys, time; from acbslurm.broker.client import BrokerClient; "
    "c = BrokerClient(name=sys.argv[1]); lease = c.acquire(int(sys.argv[2])); "
    "time.sleep(float(sys.argv[3])); c.release(lease); c.close(); "
    "sys.argv[4:] and open(sys.argv[4], 'w').close()"
)


def broker_start(err: str) -> str:
    """Job script lines: the job's broker in the background (its stderr to ``err``)."""
    return (
        f'{_ACB} broker serve 2>"{err}" &\n'
        f"until {_ACB} broker status >/dev/null 2>&1; do sleep 0.1; done\n"
    )


def broker_program(name: str, gpus: int, seconds: float, marker: str = "") -> str:
    """A job script line: a program that holds ``gpus`` of the broker's GPUs for
    ``seconds``, then releases them (and touches ``marker``, if given)."""
    extra = f' "{marker}"' if marker else ""
    return f"{_PY} -c {shlex.quote(_PROGRAM)} {name} {gpus} {seconds}{extra}"


def submit_spec(sb: Any, workdir: Path, text: str, user: str = "user1") -> str:
    """The spec ``text`` written into ``workdir`` and submitted there by ``user``
    (`acbslurm submit --json`), which must succeed; its one job id."""
    spec = workdir / f"spec-{time.monotonic_ns()}.yaml"
    spec.write_text(text)
    spec.chmod(0o644)
    res = acbslurm_as(sb, user, "submit", "--json", str(spec), cwd=workdir, timeout=120)
    assert res.returncode == 0, res.stderr
    (job,) = json.loads(res.stdout)["job_ids"]
    return str(job)
