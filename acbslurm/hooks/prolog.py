"""Slurm's Prolog (``acbslurm-prolog``, ``acbslurm prolog``): runs as root before each job.

It maps the job's GPUs, writes the root-owned job record ``acbslurm run`` reads, makes
the job's runtime directory (and starts its cgroup helper), and opens the job's GPU files
to its user when the fence is on. Its exit code matters to Slurm: non-zero drains the
node and requeues the job, so it fails only when the job's GPUs cannot be mapped,
recorded or opened to the user. When the job's CPU/memory allocation cannot be read
(scontrol failed) it does not fail the job: it says so and records the refusal, and
``acbslurm run`` then refuses to start a container in that job, saying why; it never
falls back to "no limits".
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from acbslurm.config import load_settings
from acbslurm.errors import AcbslurmError, ConfigError
from acbslurm.gpu.node import job_gpus, node_name
from acbslurm.gpuvalue import minors as known_minors
from acbslurm.hooks.common import (
    bin_dir,
    docker_hosts,
    fence,
    gpu_files,
    map_dirs,
    say,
    socket_exists,
    sweep_earlier_jobs,
    user_of,
    with_deadline,
)
from acbslurm.hooks.jobmap import add_job
from acbslurm.jobrecord import JobRecord, check_job_id, write_record
from acbslurm.units import is_ascii_int

TYPE_CHECKING = False  # a lean-path module: CONTRIBUTING.md, "Lean imports"
if TYPE_CHECKING:
    from acbslurm.config import Settings
    from acbslurm.slurm.allocation import Allocation, JobFacts


def prolog_main() -> int:
    # A prolog that cannot map the GPUs in time must fail: the job would run unmapped.
    return with_deadline("prolog", run_prolog, 1)


def run_prolog(env: Mapping[str, str]) -> int:
    job_id = ""
    settings: Settings | None = None
    try:
        job_id = check_job_id(env.get("SLURM_JOB_ID", ""))
        settings = load_settings()
        uid, user = user_of(env)
        node = node_name(env)
        slurm = bin_dir(settings, env)
        alloc, alloc_error, facts = _allocation(job_id, node, slurm)
        gpus = job_gpus(_with_all_gpu_types(env, alloc, job_id), settings)
        rec = JobRecord(
            job_id=job_id,
            user=user,
            uid=uid,
            node=node,
            gpus=gpus.gpus,
            cpus=alloc.cpus,
            mem_mb=alloc.mem_mb,
            created=time.time(),
            alloc_error=alloc_error,
            docker_socket=_has_docker_socket(settings, uid, user),
        )
        path = write_record(settings.record_dir, rec)
        _make_job_dir(settings, job_id, uid)
        own = known_minors(rec.gpus)
        fence(settings, env, keep=job_id, must=tuple(gpu_files(settings, env, own) if own else ()))
    except (AcbslurmError, OSError, ValueError) as exc:
        say("error", f"job {job_id or '?'}: {exc}")
        if job_id and settings is not None:
            # A failed prolog takes its job's grant back (never raises: it is failing already).
            try:
                fence(settings, env, drop=job_id)
            except (AcbslurmError, OSError) as err:
                say("error", f"GPU fence: {err}")
        return 1
    say("info", f"job {job_id}: GPUs {','.join(rec.uuids) or '-'} recorded in {path}")
    # The site's GPU-to-job files (hooks/jobmap.py; nothing when unset). Monitoring, not
    # safety: a failure is said, the job runs.
    try:
        add_job(map_dirs(settings), job_id, uid, [(i.index, i.uuid) for i in gpus.info])
    except (AcbslurmError, OSError, ValueError) as exc:
        say("error", f"job {job_id}: GPU-to-job files for monitoring not written: {exc}")
    _keep_gpu_history(rec, slurm_job_ref(env, facts), facts, slurm)
    _sweep_earlier_if_any(uid, user, settings)
    return 0


def slurm_job_ref(env: Mapping[str, str], facts: JobFacts | None) -> str:
    """How ``scontrol update`` must name this job: ``ARRAYJOB_TASK`` for an array task
    (``JobFacts.ref``), from SLURM_ARRAY_* where they are set, else from squeue's
    answer; "" when neither is there.

    slurmd gives the prolog no SLURM_ARRAY_* (22.05 to 25.11: only PrologSlurmctld and
    the task prologs get them), so without squeue's answer the raw id is all there is,
    and an array's last task to start has the array's own id: ``scontrol update
    job=<it>`` would write every task of the array. A raw id that may be that is never
    used to write."""
    array_job = env.get("SLURM_ARRAY_JOB_ID", "").strip()
    task = env.get("SLURM_ARRAY_TASK_ID", "").strip()
    if is_ascii_int(array_job) and is_ascii_int(task):
        return f"{int(array_job)}_{int(task)}"
    return "" if facts is None else facts.ref()


def _allocation(job_id: str, node: str, slurm: str) -> tuple[Allocation, str, JobFacts | None]:
    """The job's CPUs/memory on this node, or why they could not be read (said), and
    squeue's facts of the job (None when slurmctld did not answer)."""
    from acbslurm.errors import SlurmError
    from acbslurm.slurm.allocation import Allocation, allocation_retried

    def retrying(why: str) -> None:
        say("warning", f"job {job_id}: asking slurmctld again: {why}")

    try:
        alloc, facts, named = allocation_retried(job_id, node, slurm, retrying=retrying)
    except SlurmError as exc:
        why = str(exc).splitlines()[0]
        say(
            "error",
            f"job {job_id}: cannot read its CPU/memory allocation: {why}; "
            "`acbslurm run` will refuse to start containers in this job",
        )
        return Allocation(), why, None
    if named > 1:
        say(
            "warning",
            f"job {job_id}: scontrol's answer names {node} in {named} allocation groups "
            "(the job's name, comment or paths hold one): CPUs and memory from squeue, "
            "GPUs from slurmd's SLURM_JOB_GPUS alone",
        )
    return alloc, "", facts


def _with_all_gpu_types(
    env: Mapping[str, str], alloc: Allocation, job_id: str
) -> Mapping[str, str]:
    """``env`` with slurmctld's GPU indices for the node when they differ from the
    prolog's SLURM_JOB_GPUS: Slurm 22.05 lists one GRES type's there (a job of
    ``gpu:h200:1,gpu:a100:1`` would get its a100 alone): only ever more of the GPUs
    slurmctld gave the job, never other ones. UUIDs there are kept."""
    given = env.get("SLURM_JOB_GPUS", "")
    tokens = [t.strip() for t in given.split(",") if t.strip()]
    if alloc.gpu_indices is None or not tokens or not all(is_ascii_int(t) for t in tokens):
        return env  # no GPUs in the prolog's view (count-only GRES...), or UUIDs
    indices = ",".join(str(i) for i in alloc.gpu_indices)
    had = {int(t) for t in tokens}
    if not had < set(alloc.gpu_indices):
        return env  # the same GPUs, or a disagreement the mapping reports as before
    say("info", f"job {job_id}: GPUs {indices} from scontrol, SLURM_JOB_GPUS={given}")
    return {**env, "SLURM_JOB_GPUS": indices}


def _has_docker_socket(settings: Settings, uid: int, user: str) -> bool:
    """Whether one of the user's Docker sockets is there (True when it cannot be told)."""
    if uid < 0:
        return True
    try:
        return any(socket_exists(h) for h, _ in docker_hosts(settings, uid, user))
    except ConfigError:
        return True


def _make_job_dir(settings: Settings, job_id: str, uid: int) -> None:
    """The job's runtime directory (its broker's socket goes there): the user's, 0700;
    and, when the site joins containers to their job's cgroups, the job's cgroup helper
    (cgroups/helper.py), without which `acbslurm run` in this job starts no container."""
    if uid < 0:
        return
    import pwd

    from acbslurm.jobsockets import create_job_dir

    try:
        gid = pwd.getpwuid(uid).pw_gid
    except KeyError:
        gid = -1  # a directory service that does not answer now: group stays root
    create_job_dir(settings.job_runtime_dir, job_id, uid, gid)
    if settings.container_cgroups == "join":
        from acbslurm.cgroups.helper import start

        start(settings.record_dir, job_id, uid, gid, settings.job_runtime_dir)


def _keep_gpu_history(rec: JobRecord, ref: str, facts: JobFacts | None, slurm: str) -> None:
    """The job's GPUs into its AdminComment (``ref``: scontrol's name for the job, ""
    when it has none that names this job alone), for the report after the job is gone.

    History, not safety: a failure is said (slurmd's log, syslog) but fails no job.
    """
    from acbslurm.slurm.gpu_history import record_job_gpus

    if not rec.gpus:
        return
    if not ref or facts is None:
        say(
            "warning",
            f"job {rec.job_id}: GPUs {','.join(rec.uuids)} kept in its record on "
            f"{rec.node} only, not in its AdminComment (the report will show none): "
            "slurmctld did not answer, and without its answer the job's id may be an "
            "array's, which would write every task of the array",
        )
        return
    try:
        record_job_gpus(ref, rec.gpus, facts, bin_dir=slurm)
    except AcbslurmError as exc:
        say("warning", f"job {ref}: GPUs not kept in its AdminComment: {exc}")


def _sweep_earlier_if_any(uid: int, user: str, settings: Settings) -> None:
    """Containers left by this user's jobs whose daemon was down: removed now, if it
    answers (one file check when there are none; never fails the prolog)."""
    from acbslurm.hooks.orphans import unswept

    if uid < 0 or not unswept(settings.record_dir, uid):
        return
    try:
        sweep_earlier_jobs(uid, docker_hosts(settings, uid, user), settings)
    except AcbslurmError as exc:
        say("warning", f"left-over containers not removed: {exc}")
