"""Slurm's Prolog, Epilog and TaskProlog (console scripts and ``acbslurm prolog`` etc.).

Each returns an exit code. They import only what they need (no click, no Docker SDK)
because slurmd waits for them on every job. Exit codes matter to Slurm:
- prolog: non-zero drains the node and requeues the job; it fails only when the
  job's GPUs cannot be mapped (or recorded, which ``acbslurm run`` needs);
- epilog: non-zero drains the node; it fails only when a container of the job may
  still be running (a daemon answered but the container could not be removed);
- task prolog: always 0 (its stdout ``export`` lines go into the job's environment).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping

from acbslurm.errors import AcbslurmError
from acbslurm.units import is_ascii_int

_NAME = "acbslurm"


def _say(level: str, msg: str) -> None:
    """One line on stderr (slurmd's log at debug levels); no logging import: speed."""
    print(f"{_NAME}: {level}: {msg}", file=sys.stderr)


def _setup_logging(name: str) -> None:
    global _NAME
    _NAME = f"acbslurm-{name}"


def _user_of(env: Mapping[str, str]) -> tuple[int, str]:
    """The job's uid (-1: unknown) and user name ("" when no name can be found)."""
    raw = env.get("SLURM_JOB_UID", "").strip()
    uid = int(raw) if is_ascii_int(raw) else -1
    user = env.get("SLURM_JOB_USER", "")
    if not user and uid >= 0:
        import pwd

        try:
            user = pwd.getpwuid(uid).pw_name
        except KeyError:  # e.g. a directory service that does not answer now
            user = ""
    return uid, user


def run_prolog(env: Mapping[str, str]) -> int:
    from acbslurm.config import load_settings
    from acbslurm.gpu.node import job_gpus, node_name
    from acbslurm.jobrecord import JobRecord, check_job_id, write_record
    from acbslurm.slurm.allocation import job_allocation

    job_id = ""
    try:
        job_id = check_job_id(env.get("SLURM_JOB_ID", ""))
        settings = load_settings()
        gpus = job_gpus(env, settings)
        uid, user = _user_of(env)
        node = node_name(env)
        alloc = job_allocation(job_id, node)
        rec = JobRecord(
            job_id=job_id,
            user=user,
            uid=uid,
            node=node,
            gpu_indices=gpus.indices,
            gpu_uuids=gpus.uuids,
            gpu_minors=gpus.minors,
            cpus=alloc.cpus,
            mem_mb=alloc.mem_mb,
            created=time.time(),
        )
        path = write_record(settings.record_dir, rec)
    except (AcbslurmError, OSError, ValueError) as exc:
        _say("error", f"job {job_id or '?'}: {exc}")
        return 1
    _say("info", f"job {job_id}: GPUs {','.join(rec.gpu_uuids) or '-'} recorded in {path}")
    return 0


def run_epilog(env: Mapping[str, str]) -> int:
    from acbslurm.config import load_settings
    from acbslurm.dockerapi.hosts import user_docker_host
    from acbslurm.hooks.sweep import sweep_job_containers
    from acbslurm.jobrecord import check_job_id, read_record, remove_record

    try:
        job_id = check_job_id(env.get("SLURM_JOB_ID", ""))
        settings = load_settings()
    except AcbslurmError as exc:
        _say("error", f"{exc} (nothing swept)")
        return 0  # nothing we could do; draining would not help
    try:
        rec = read_record(settings.record_dir, job_id)
    except AcbslurmError as exc:
        _say("warning", f"job {job_id}: {exc}")
        rec = None
    uid, user = (rec.uid, rec.user) if rec else _user_of(env)
    hosts = []
    if uid >= 0:
        try:
            hosts.append(user_docker_host(settings, uid, user))
        except (KeyError, IndexError, ValueError) as exc:
            _say("error", f"job {job_id}: bad docker_host setting {settings.docker_host!r}: {exc}")
            _say("error", f"job {job_id}: its containers cannot be swept: draining")
            return 1
    if settings.system_docker_host:
        hosts.append(settings.system_docker_host)
    result = sweep_job_containers(job_id, hosts, settings.hook_docker_timeout)
    if result.failures:
        time.sleep(0.5)  # one retry: a daemon may have been busy
        result = sweep_job_containers(job_id, hosts, settings.hook_docker_timeout)
    if result.removed:
        _say("info", f"job {job_id}: removed containers {','.join(result.removed)}")
    if uid >= 0:
        from acbslurm.hooks.broker_sockets import remove_broker_sockets

        gone = remove_broker_sockets(job_id, uid)
        if gone:
            _say("info", f"job {job_id}: removed broker sockets {','.join(gone)}")
    try:
        remove_record(settings.record_dir, job_id)
    except OSError as exc:
        _say("warning", f"job {job_id}: cannot remove record: {exc}")
    if result.failures:
        for f in result.failures:
            _say("error", f"job {job_id}: {f}")
        _say("error", f"job {job_id}: a container may still hold the job's GPUs: draining")
        return 1
    return 0


def run_task_prolog(env: Mapping[str, str]) -> int:
    from acbslurm.config import load_settings
    from acbslurm.jobrecord import check_job_id, read_record

    try:
        job_id = check_job_id(env.get("SLURM_JOB_ID", ""))
        rec = read_record(load_settings().record_dir, job_id)
    except AcbslurmError as exc:
        print(f"print acbslurm: {exc}")
        return 0
    if rec is None:
        print(f"print acbslurm: no job record for job {job_id}: is the acbslurm prolog set up?")
        return 0
    print(f"export ACBSLURM_GPU_UUIDS={','.join(rec.gpu_uuids)}")
    return 0


# A hook never hangs: past this many seconds it gives up with a message (before Slurm's
# own PrologEpilogTimeout would kill it silently). Every Docker and Slurm call has its own,
# shorter timeout; this also bounds what has none (a hung NVML driver, a stuck file system).
HOOK_DEADLINE_S = 30


def _with_deadline(name: str, fn: Callable[[Mapping[str, str]], int], on_timeout: int) -> int:
    import signal

    def expired(_signum: int, _frame: object) -> None:
        _say("error", f"{name} did not finish within {HOOK_DEADLINE_S} s: giving up")
        # os._exit: no cleanup that could hang too.
        os._exit(on_timeout)

    _setup_logging(name)
    signal.signal(signal.SIGALRM, expired)
    signal.alarm(HOOK_DEADLINE_S)
    try:
        return fn(os.environ)
    finally:
        signal.alarm(0)


def prolog_main() -> int:
    # A prolog that cannot map the GPUs in time must fail: the job would run unmapped.
    return _with_deadline("prolog", run_prolog, 1)


def epilog_main() -> int:
    # An epilog that cannot finish may leave a container on the GPU: drain the node.
    return _with_deadline("epilog", run_epilog, 1)


def task_prolog_main() -> int:
    return _with_deadline("task-prolog", run_task_prolog, 0)
