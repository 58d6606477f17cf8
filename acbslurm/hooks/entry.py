"""Slurm's Prolog, Epilog and TaskProlog (console scripts and ``acbslurm prolog`` etc.).

Each returns an exit code. They import only what they need (no click, no Docker SDK)
because slurmd waits for them on every job. Exit codes matter to Slurm:
- prolog: non-zero drains the node and requeues the job; it fails only when the
  job's GPUs cannot be mapped (or recorded, which ``acbslurm run`` needs). When the
  job's CPU/memory allocation cannot be read (scontrol failed), it does not fail the
  job: it logs an error and records the refusal, and ``acbslurm run`` then refuses to
  start a container in that job, saying why; it never falls back to "no limits";
- epilog: non-zero drains the node; it fails only when a container of the job may
  still be running (a daemon answered but the container could not be removed);
- task prolog: always 0 (its stdout ``export`` lines go into the job's environment).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping

from acbslurm.errors import AcbslurmError, ConfigError
from acbslurm.gpuvalue import minors as known_minors
from acbslurm.units import is_ascii_int

# On the hook path: no typing at run time (tests/unit/hooks/test_hooks_imports.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from acbslurm.config import Settings
    from acbslurm.gpu.fence import FenceResult
    from acbslurm.hooks.jobmap import MapDirs
    from acbslurm.jobrecord import JobRecord
    from acbslurm.slurm.allocation import Allocation, JobFacts

_NAME = "acbslurm"
_SYSLOG_OPEN = ""
# syslog priorities (syslog.LOG_ERR etc., spelled out: the module is imported on first use).
_PRIORITY = {"error": 3, "warning": 4, "info": 6}


def _say(level: str, msg: str) -> None:
    """One line on stderr and in syslog; no logging import: speed.

    slurmd writes a hook's output to its log only at debug levels, or with the exit
    code when the hook failed; syslog (facility daemon, tag ``acbslurm-prolog`` etc.)
    keeps every line. ``syslog`` is a builtin module (~0.1 ms); with no syslog daemon
    (no /dev/log) the C library drops the message.
    """
    print(f"{_NAME}: {level}: {msg}", file=sys.stderr)
    _to_syslog(level, msg)


def _to_syslog(level: str, msg: str) -> None:
    global _SYSLOG_OPEN
    import syslog

    if _SYSLOG_OPEN != _NAME:
        syslog.openlog(_NAME, syslog.LOG_PID, syslog.LOG_DAEMON)
        _SYSLOG_OPEN = _NAME
    try:
        syslog.syslog(_PRIORITY.get(level, 6), f"{level}: {msg}")
    except (OSError, ValueError):  # a NUL in a message, a full log socket: stderr has it
        return


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

    job_id = ""
    try:
        job_id = check_job_id(env.get("SLURM_JOB_ID", ""))
        settings = load_settings()
        uid, user = _user_of(env)
        node = node_name(env)
        bin_dir = _bin_dir(settings, env)
        alloc, alloc_error, facts = _allocation(job_id, node, bin_dir)
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
        _start_cgroup_helper(settings, job_id, uid)
        _fence(settings, env, keep=job_id, must=tuple(_own_files(rec, settings, env)))
    except (AcbslurmError, OSError, ValueError) as exc:
        _say("error", f"job {job_id or '?'}: {exc}")
        if job_id:
            _fence_quietly(_settings_or_none(), env, drop=job_id)
        return 1
    _say("info", f"job {job_id}: GPUs {','.join(rec.uuids) or '-'} recorded in {path}")
    _map_for_monitoring(settings, job_id, uid, [(i.index, i.uuid) for i in gpus.info])
    _keep_gpu_history(rec, slurm_job_ref(env, facts), facts, bin_dir)
    _sweep_earlier_if_any(uid, user, settings)
    return 0


def _map_dirs(settings: Settings) -> MapDirs:
    from acbslurm.hooks.jobmap import MapDirs

    return MapDirs(settings.record_dir, settings.dcgm_job_mapping_dir, settings.gpustat_dir)


def _map_for_monitoring(
    settings: Settings, job_id: str, uid: int, gpus: list[tuple[int | None, str]]
) -> None:
    """The job's GPUs (NVML index, UUID) into the site's GPU-to-job files, when set
    (hooks/jobmap.py). Monitoring, not safety: a failure is said, the job runs."""
    if not (settings.dcgm_job_mapping_dir or settings.gpustat_dir):
        return
    from acbslurm.hooks.jobmap import add_job

    try:
        add_job(_map_dirs(settings), job_id, uid, gpus)
    except (AcbslurmError, OSError, ValueError) as exc:
        _say("error", f"job {job_id}: GPU-to-job files for monitoring not written: {exc}")


def _unmap_for_monitoring(settings: Settings, job_id: str) -> None:
    if not (settings.dcgm_job_mapping_dir or settings.gpustat_dir):
        return
    from acbslurm.hooks.jobmap import drop_job

    drop_job(_map_dirs(settings), job_id)


def _settings_or_none() -> Settings | None:
    from acbslurm.config import load_settings

    try:
        return load_settings()
    except AcbslurmError:
        return None


class FenceError(AcbslurmError):
    """The job's own GPU files could not be opened to its user: the job would run
    without the GPUs Slurm gave it."""


def _own_files(rec: JobRecord, settings: Settings, env: Mapping[str, str]) -> list[str]:
    own = known_minors(rec.gpus)
    return _gpu_files(settings, env, own) if own else []


def _fence(
    settings: Settings,
    env: Mapping[str, str],
    keep: str = "",
    drop: str = "",
    must: tuple[str, ...] = (),
) -> None:
    """Reconcile the node's GPU files with its running jobs (gpu/fence.py), when the
    fence is on; FenceError when one of ``must`` (the prolog's own GPUs) failed."""
    if not settings.gpu_fence:
        return
    from acbslurm.gpu.fence import Liveness, fence_node, slurm_running_jobs
    from acbslurm.gpu.node import node_name

    node = node_name(env)
    bin_dir = _bin_dir(settings, env)
    live = Liveness(keep=keep, drop=drop, ask=lambda: slurm_running_jobs(node, bin_dir))
    result, notes = fence_node(settings, node, live)
    _say_fence(result, notes)
    bad = [p for p in must if p in result.failed]
    if bad:
        raise FenceError(f"the job's GPU files {', '.join(bad)} cannot be opened to its user")


def _say_fence(result: FenceResult, notes: list[str]) -> None:
    for note in notes:
        _say("warning", f"GPU fence: {note}")
    if result.granted or result.revoked:
        what = [f"+{g}" for g in result.granted] + [f"-{r}" for r in result.revoked]
        _say("info", f"GPU fence: {' '.join(what)}")
    for path, why in result.failed.items():
        _say("error", f"GPU fence: cannot set the ACL of {path}: {why}")


def _fence_quietly(settings: Settings | None, env: Mapping[str, str], drop: str) -> None:
    """A failed prolog takes its job's grant back (never raises: it is failing already)."""
    if settings is None:
        return
    try:
        _fence(settings, env, drop=drop)
    except (AcbslurmError, OSError) as exc:
        _say("error", f"GPU fence: {exc}")


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
    _say("info", f"job {job_id}: GPUs {indices} from scontrol, SLURM_JOB_GPUS={given}")
    return {**env, "SLURM_JOB_GPUS": indices}


def _keep_gpu_history(rec: JobRecord, ref: str, facts: JobFacts | None, bin_dir: str) -> None:
    """The job's GPUs into its AdminComment (``ref``: scontrol's name for the job, ""
    when it has none that names this job alone), for the report after the job is gone.

    History, not safety: a failure is said (slurmd's log, syslog) but fails no job.
    """
    from acbslurm.slurm.gpu_history import record_job_gpus

    if not rec.gpus:
        return
    if not ref or facts is None:
        _say(
            "warning",
            f"job {rec.job_id}: GPUs {','.join(rec.uuids)} kept in its record on "
            f"{rec.node} only, not in its AdminComment (the report will show none): "
            "slurmctld did not answer, and without its answer the job's id may be an "
            "array's, which would write every task of the array",
        )
        return
    try:
        record_job_gpus(ref, rec.gpus, facts, bin_dir=bin_dir)
    except AcbslurmError as exc:
        _say("warning", f"job {ref}: GPUs not kept in its AdminComment: {exc}")


def _allocation(job_id: str, node: str, bin_dir: str) -> tuple[Allocation, str, JobFacts | None]:
    """The job's CPUs/memory on this node, or why they could not be read (logged), and
    squeue's facts of the job (None when slurmctld did not answer)."""
    from acbslurm.errors import SlurmError
    from acbslurm.slurm.allocation import Allocation, allocation_retried

    def retrying(why: str) -> None:
        _say("warning", f"job {job_id}: asking slurmctld again: {why}")

    try:
        alloc, facts, named = allocation_retried(job_id, node, bin_dir, retrying=retrying)
    except SlurmError as exc:
        why = str(exc).splitlines()[0]
        _say(
            "error",
            f"job {job_id}: cannot read its CPU/memory allocation: {why}; "
            "`acbslurm run` will refuse to start containers in this job",
        )
        return Allocation(), why, None
    if named > 1:
        _say(
            "warning",
            f"job {job_id}: scontrol's answer names {node} in {named} allocation groups "
            "(the job's name, comment or paths hold one): CPUs and memory from squeue, "
            "GPUs from slurmd's SLURM_JOB_GPUS alone",
        )
    return alloc, "", facts


def _make_job_dir(settings: Settings, job_id: str, uid: int) -> None:
    """The job's runtime directory (its broker's socket goes there): the user's, 0700."""
    if uid < 0:
        return
    import pwd

    from acbslurm.jobsockets import create_job_dir

    try:
        gid = pwd.getpwuid(uid).pw_gid
    except KeyError:
        gid = -1  # a directory service that does not answer now: group stays root
    create_job_dir(settings.job_runtime_dir, job_id, uid, gid)


def _start_cgroup_helper(settings: Settings, job_id: str, uid: int) -> None:
    """The job's cgroup helper (cgroups/helper.py), when the site joins containers to
    their job's cgroups: without it, `acbslurm run` in this job cannot start a container."""
    if uid < 0 or settings.container_cgroups != "join":
        return
    import pwd

    from acbslurm.cgroups.helper import start

    try:
        gid = pwd.getpwuid(uid).pw_gid
    except KeyError:
        gid = -1
    start(settings.record_dir, job_id, uid, gid, settings.job_runtime_dir)


def _stop_cgroup_helper(settings: Settings, job_id: str) -> None:
    from acbslurm.cgroups.helper import stop

    try:
        stop(settings.record_dir, job_id, settings.job_runtime_dir)
    except OSError as exc:
        _say("warning", f"job {job_id}: cannot end its cgroup helper: {exc}")


def _sweep_earlier_if_any(uid: int, user: str, settings: Settings) -> None:
    """Containers left by this user's jobs whose daemon was down: removed now, if it
    answers (one file check when there are none; never fails the prolog)."""
    from acbslurm.hooks.orphans import unswept

    if uid < 0 or not unswept(settings.record_dir, uid):
        return
    try:
        _sweep_earlier_jobs(uid, _docker_hosts(settings, uid, user), settings)
    except AcbslurmError as exc:
        _say("warning", f"left-over containers not removed: {exc}")


def run_epilog(env: Mapping[str, str]) -> int:
    from acbslurm.config import load_settings
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
    own = known_minors(rec.gpus) if rec else []
    had_socket = rec.docker_socket if rec else True
    problems = _step(
        job_id,
        "container removal",
        lambda: _clean_up_containers(job_id, uid, user, own, settings, env, had_socket),
    )
    problems += _step(
        job_id, "GPU fence", lambda: _fence_at_end(job_id, uid, user, own, settings, env)
    )
    from acbslurm.jobsockets import remove_job_dir

    # Not safety steps: a failure is said, the node is not drained for it.
    _step(job_id, "cgroup helper", lambda: _stop_cgroup_helper(settings, job_id), drain=False)
    _step(
        job_id, "job history", lambda: _keep_history(job_id, uid, rec, settings, env), drain=False
    )
    _step(job_id, "GPU-to-job files", lambda: _unmap_for_monitoring(settings, job_id), drain=False)
    try:
        remove_job_dir(settings.job_runtime_dir, job_id)
    except (OSError, RecursionError) as exc:  # RecursionError: a tree too deep for rmtree
        _say("warning", f"job {job_id}: cannot remove its runtime directory: {exc}")
    try:
        remove_record(settings.record_dir, job_id)
    except OSError as exc:
        # Not a drain: the job has ended and its id never comes back, so the record can
        # give nobody a GPU (`acbslurm run` also checks the caller descends from the
        # job's slurmstepd). But the next prolog cannot write either: said loudly.
        _say(
            "error",
            f"job {job_id}: its record stays in {settings.record_dir} ({exc.strerror}); "
            "the next prolog on this node will fail the same way: fix the directory",
        )
    if problems:
        for problem in problems:
            _say("error", f"job {job_id}: {problem}")
        _drain(env, settings, f"acbslurm: job {job_id}: a container may still hold its GPUs")
        return 1
    return 0


def _step(
    job_id: str, what: str, step: Callable[[], list[str] | None], drain: bool = True
) -> list[str]:
    """``step()``'s problems. One that raised what it was not written to expect (a bug,
    or a user's input no rule foresaw) is not the epilog's end: the steps after it (the
    fence, the holders' kill, the record's removal) still run. Its failure is a problem
    (the node drained) when ``drain``, else said."""
    try:
        return step() or []
    except Exception as exc:
        problem = f"{what} failed: {type(exc).__name__}: {str(exc)[:200]!r}"
    if drain:
        return [problem]
    _say("error", f"job {job_id}: {problem}")
    return []


def _keep_history(
    job_id: str, uid: int, rec: JobRecord | None, settings: Settings, env: Mapping[str, str]
) -> None:
    """This node's record of the job for the report (its GPUs, its pool's usage, from
    the job's runtime folder before the folder goes) handed to a sender, which writes it
    into the job's SystemComment in slurmdbd (hooks/usage.py); and what earlier
    epilogs here kept."""
    from acbslurm.gpu.node import node_name
    from acbslurm.hooks.usage import has_pending, keep_history, pending_name
    from acbslurm.jobsockets import job_dir
    from acbslurm.slurm.gpu_history import gpu_token

    gpus = gpu_token(rec.gpus) if rec is not None and rec.gpus else ""
    folder = job_dir(job_id, settings.job_runtime_dir)
    node = node_name(env)
    if keep_history(job_id, uid, node, folder, settings.record_dir, gpus, _say) or has_pending(
        settings.record_dir
    ):
        # The Slurm clients found from here: the sender's parent is no longer slurmd.
        first = pending_name(job_id, node)
        _start_sender({**os.environ, "ACBSLURM_SLURM_BIN_DIR": _bin_dir(settings, env)}, first)


# The epilog's own pending file, named to the sender it starts (hooks/usage.py).
SENDER_FIRST = "ACBSLURM_SENDER_FIRST"


def _start_sender(env: Mapping[str, str], first: str = "") -> int:
    """``history_sender_main`` in a session of its own (slurmd kills the hook's process
    group when the hook returns), on /dev/null (slurmd reads the hook's output until
    every writer has closed it): its messages go to syslog. ``first``: this epilog's own
    pending file, sent before the others. The sender's pid.

    ``-I`` (isolated): no current directory on ``sys.path`` (slurmd's may be /var/tmp,
    where anyone can leave a ``json.py`` for root to import), no user site, no PYTHON*
    variables; and the sender works from ``/``."""
    import acbslurm

    top = os.path.dirname(os.path.dirname(os.path.abspath(acbslurm.__file__)))
    code = (
        f"import os, sys; os.chdir('/'); sys.path.insert(0, {top!r}); "
        "from acbslurm.hooks.entry import history_sender_main as m; sys.exit(m())"
    )
    null = os.devnull
    actions = [(os.POSIX_SPAWN_OPEN, fd, null, os.O_RDWR, 0) for fd in (0, 1, 2)]
    return os.posix_spawn(
        sys.executable,
        [sys.executable, "-I", "-c", code],
        {**env, SENDER_FIRST: first},
        file_actions=actions,
        setsid=True,
    )


def run_history_sender(env: Mapping[str, str]) -> int:
    """The records this node's epilogs kept, sent to slurmdbd (hooks/usage.py)."""
    import functools

    from acbslurm.config import load_settings
    from acbslurm.hooks.usage import send_pending

    try:
        settings = load_settings()
    except AcbslurmError as exc:
        _say("error", f"{exc} (the kept job records are not sent)")
        return 0

    @functools.cache
    def bin_dir() -> str:
        return _bin_dir(settings, env)

    send_pending(settings.record_dir, bin_dir, _say, first=env.get(SENDER_FIRST, ""))
    return 0


def _fence_at_end(
    job_id: str, uid: int, user: str, minors: list[int], settings: Settings, env: Mapping[str, str]
) -> list[str]:
    """The job's users lose its GPU files (unless another running job of theirs holds
    one), then every process of the user (or a subuid) still holding one is killed: an
    open file outlives the permission that let it be opened. What may still hold one."""
    if not settings.gpu_fence:
        return []
    try:
        _fence(settings, env, drop=job_id)
    except (AcbslurmError, OSError) as exc:
        return [f"GPU fence: {exc}"]
    if uid < 0 or not minors:
        return []
    from acbslurm.gpu.fence import read_acl

    gone = []
    for path in _gpu_files(settings, env, minors):
        try:
            if not read_acl(path).user_perm(uid):
                gone.append(path)
        except (OSError, ValueError):
            continue  # no such file here (the /dev/nvidiaN name on the sandbox)
    return _kill_holders(job_id, uid, user, gone)


def _kill_holders(job_id: str, uid: int, user: str, devices: list[str]) -> list[str]:
    from acbslurm.hooks.orphans import kill_device_holders

    killed, left = kill_device_holders(devices, uid, user)
    if killed:
        pids = ",".join(map(str, killed))
        _say("warning", f"job {job_id}: killed processes {pids} still holding its GPUs")
    if left:
        return [f"processes {left} of {user or uid} still hold the job's GPUs after SIGKILL"]
    return []


def _docker_hosts(settings: Settings, uid: int, user: str) -> list[tuple[str, int]]:
    """The daemons to sweep, each with the uid that must serve it: the user's own, root's."""
    from acbslurm.dockerapi.hosts import user_docker_host

    hosts = []
    if uid >= 0:
        try:
            hosts.append((user_docker_host(settings, uid, user), uid))
        except (KeyError, IndexError, ValueError) as exc:
            raise ConfigError(f"bad docker_host setting {settings.docker_host!r}: {exc}") from None
    if settings.system_docker_host:
        hosts.append((settings.system_docker_host, 0))
    return hosts


def _clean_up_containers(
    job_id: str,
    uid: int,
    user: str,
    minors: list[int],
    settings: Settings,
    env: Mapping[str, str],
    had_socket: bool = True,
) -> list[str]:
    """Remove the job's containers; what may still run (empty: nothing can)."""
    from acbslurm.hooks.sweep import sweep_job_containers

    try:
        hosts = _docker_hosts(settings, uid, user)
    except ConfigError as exc:
        return [f"{exc}: its containers cannot be swept"]
    result = sweep_job_containers(job_id, hosts, settings.hook_docker_timeout)
    if result.failures:
        time.sleep(0.5)  # one retry: a daemon may have been busy
        result = sweep_job_containers(job_id, hosts, settings.hook_docker_timeout)
    if result.removed:
        _say("info", f"job {job_id}: removed containers {','.join(result.removed)}")
    problems = list(result.failures)
    if result.unreachable and uid >= 0:
        # "Connection refused" says nothing about the containers: they outlive their
        # daemon under containerd-shim. Find them without it.
        devices = _gpu_files(settings, env, minors)
        problems += _after_unreachable(
            job_id, uid, user, devices, result.unreachable, settings, had_socket
        )
    if uid >= 0 and not result.unreachable:
        _sweep_earlier_jobs(uid, hosts, settings)
    return problems


def _gpu_files(settings: Settings, env: Mapping[str, str], minors: list[int]) -> list[str]:
    """The device files of the job's GPUs: ``/dev/nvidiaN`` and those of gres.conf's
    ``File=`` lines with the same minor numbers (a node whose GPUs live elsewhere, as the
    sandbox's emulated ones); ``device_holders`` compares device numbers anyway."""
    from acbslurm.gpu.gres_conf import gpu_device_files
    from acbslurm.gpu.mapping import device_minor
    from acbslurm.gpu.node import node_name

    files = [f"/dev/nvidia{m}" for m in minors]
    try:
        listed = gpu_device_files(settings.gres_conf, node_name(env))
    except (AcbslurmError, OSError):
        return files  # AutoDetect or an unreadable gres.conf: the usual names
    for path in listed:
        try:
            if device_minor(path) in minors and path not in files:
                files.append(path)
        except AcbslurmError:
            continue  # gone or not a device: it cannot be held
    return files


def _after_unreachable(
    job_id: str,
    uid: int,
    user: str,
    devices: list[str],
    unreachable: list[str],
    settings: Settings,
    had_socket: bool,
) -> list[str]:
    """No daemon answered: kill the job's container processes without it, and remember
    the job for the next sweep. A user with no daemon at all (no socket file now, none
    when the job started) and no container processes has nothing to sweep: nothing said,
    nothing kept (else every job of a user without Docker would warn and grow
    ``unswept/<uid>`` for ever). A daemon stopped gracefully during the job removes its
    socket but keeps the job's stopped containers: those are remembered."""
    from acbslurm.hooks.orphans import remember_unswept

    sockets = had_socket or any(_socket_exists(h) for h in unreachable)
    # With the fence on, holders are killed after the permission goes (_fence_at_end).
    found, problems = _kill_orphans(job_id, uid, user, [] if settings.gpu_fence else devices)
    if not sockets and not found and not problems:
        return []
    _say("warning", f"job {job_id}: no Docker daemon answers at {', '.join(unreachable)}")
    for line in found:
        _say("warning", f"job {job_id}: {line}")
    try:
        remember_unswept(settings.record_dir, uid, job_id)
    except OSError as exc:
        _say("warning", f"job {job_id}: cannot note its containers for removal: {exc}")
    return problems


def _has_docker_socket(settings: Settings, uid: int, user: str) -> bool:
    """Whether one of the user's Docker sockets is there (True when it cannot be told)."""
    if uid < 0:
        return True
    try:
        return any(_socket_exists(h) for h, _ in _docker_hosts(settings, uid, user))
    except ConfigError:
        return True


def _socket_exists(host: str) -> bool:
    """Whether a daemon's socket file is there (a crashed daemon leaves its own). Not
    dockerapi.engine's socket_path: importing the client costs the prolog 5 ms."""
    if host.startswith("unix://"):
        return os.path.lexists(host[len("unix://") :])
    if host.startswith("/"):
        return os.path.lexists(host)
    return True  # not a unix socket: it cannot be told absent


def _kill_orphans(
    job_id: str, uid: int, user: str, devices: list[str]
) -> tuple[list[str], list[str]]:
    """What was found and killed (lines to say), and what may still run (problems)."""
    from acbslurm.hooks.orphans import device_holders, kill_job_processes

    killed, left = kill_job_processes(job_id, uid, user)
    found = []
    if killed:
        found.append(f"killed its container processes {','.join(map(str, killed))} without Docker")
    problems = [f"container processes {left} survived SIGKILL"] if left else []
    holders = device_holders(devices, uid, user)
    if holders:
        problems.append(f"processes {holders} of {user or uid} still hold the job's GPUs")
    return found, problems


def _sweep_earlier_jobs(uid: int, hosts: list[tuple[str, int]], settings: Settings) -> None:
    """Remove the containers of this user's jobs whose daemon was unreachable before."""
    from acbslurm.hooks.orphans import forget_unswept, unswept
    from acbslurm.hooks.sweep import sweep_job_containers

    for old in unswept(settings.record_dir, uid):
        result = sweep_job_containers(old, hosts, settings.hook_docker_timeout)
        if result.failures or result.unreachable:
            continue
        if result.removed:
            _say("info", f"job {old}: removed containers {','.join(result.removed)} (left over)")
        try:
            forget_unswept(settings.record_dir, uid, [old])
        except OSError as exc:
            _say("warning", f"job {old}: {exc}")


def _bin_dir(settings: Settings, env: Mapping[str, str]) -> str:
    from acbslurm.slurm.binaries import slurm_bin_dir

    return slurm_bin_dir(settings.slurm_bin_dir, env.get("SLURM_CONF") or settings.slurm_conf)


def _drain(env: Mapping[str, str], settings: Settings, reason: str) -> None:
    """Drain this node with a reason that names the job (Slurm's own says "Epilog error")."""
    from acbslurm.errors import CommandError
    from acbslurm.gpu.node import node_name
    from acbslurm.slurm.drain import drain_node

    node = node_name(env)
    try:
        drain_node(node, reason, timeout=5, bin_dir=_bin_dir(settings, env))
    except CommandError as exc:
        _say("error", f"cannot drain {node} with a reason ({exc}); Slurm drains it anyway")


def run_task_prolog(env: Mapping[str, str]) -> int:
    from acbslurm.config import load_settings
    from acbslurm.jobrecord import check_job_id, read_record

    try:
        job_id = check_job_id(env.get("SLURM_JOB_ID", ""))
        settings = load_settings()
        rec = read_record(settings.record_dir, job_id)
    except AcbslurmError as exc:
        print(f"print acbslurm: {exc}")
        _to_syslog("warning", str(exc))
        return 0
    if rec is None:
        msg = f"no job record for job {job_id}: is the acbslurm prolog set up?"
        print(f"print acbslurm: {msg}")
        _to_syslog("warning", msg)
        return 0
    uuids = _task_uuids(rec, env, settings.gpu_inventory)
    print(f"export ACBSLURM_GPU_UUIDS={','.join(uuids)}")
    return 0


def _task_uuids(rec: JobRecord, env: Mapping[str, str], inventory: str = "") -> list[str]:
    """The GPUs of this task (its step's SLURM_STEP_GPUS, gpu/steps.py), as `acbslurm
    run` gives its container; the job's in the batch script."""
    from acbslurm.gpu.steps import NotTheJobsGpu, record_device_files, step_record

    files = record_device_files(rec, inventory) if "SLURM_STEP_ID" in env else []
    try:
        narrowed = step_record(rec, env, files)
    except NotTheJobsGpu as exc:  # said; `acbslurm run` refuses it the same way
        print(f"print acbslurm: {exc}")
        return []
    return narrowed.uuids if narrowed else []


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


def history_sender_main() -> int:
    # A sender that cannot finish leaves the rest kept for the next one.
    return _with_deadline("history-sender", run_history_sender, 0)
