"""Slurm's Epilog (``acbslurm-epilog``, ``acbslurm epilog``): runs as root after each job,
and the history sender it starts.

It removes the job's containers, takes the job's GPU files back from its user and kills
what still holds one, stops the job's cgroup helper, hands the job's history to a
sender, and removes the job's runtime directory and record. Non-zero drains the node: it
fails only when a container or a process of the job may still hold its GPUs.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping

from acbslurm.config import load_settings
from acbslurm.errors import AcbslurmError, ConfigError
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
from acbslurm.hooks.jobmap import drop_job
from acbslurm.jobrecord import check_job_id, read_record, remove_record
from acbslurm.jobsockets import remove_job_dir

TYPE_CHECKING = False  # a lean-path module: CONTRIBUTING.md, "Lean imports"
if TYPE_CHECKING:
    from acbslurm.config import Settings
    from acbslurm.jobrecord import JobRecord

# The epilog's own pending file, named to the sender it starts (hooks/usage.py).
SENDER_FIRST = "ACBSLURM_SENDER_FIRST"


def epilog_main() -> int:
    # An epilog that cannot finish may leave a container on the GPU: drain the node.
    return with_deadline("epilog", run_epilog, 1)


def history_sender_main() -> int:
    # A sender that cannot finish leaves the rest kept for the next one.
    return with_deadline("history-sender", run_history_sender, 0)


def run_epilog(env: Mapping[str, str]) -> int:
    try:
        job_id = check_job_id(env.get("SLURM_JOB_ID", ""))
        settings = load_settings()
    except AcbslurmError as exc:
        say("error", f"{exc} (nothing swept)")
        return 0  # nothing we could do; draining would not help
    try:
        rec = read_record(settings.record_dir, job_id)
    except AcbslurmError as exc:
        say("warning", f"job {job_id}: {exc}")
        rec = None
    uid, user = (rec.uid, rec.user) if rec else user_of(env)
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
    # Not safety steps: a failure is said, the node is not drained for it.
    _step(job_id, "cgroup helper", lambda: _stop_cgroup_helper(settings, job_id), drain=False)
    _step(
        job_id, "job history", lambda: _keep_history(job_id, uid, rec, settings, env), drain=False
    )
    # The site's GPU-to-job files (hooks/jobmap.py; nothing when unset).
    _step(job_id, "GPU-to-job files", lambda: drop_job(map_dirs(settings), job_id), drain=False)
    try:
        remove_job_dir(settings.job_runtime_dir, job_id)
    except (OSError, RecursionError) as exc:  # RecursionError: a tree too deep for rmtree
        say("warning", f"job {job_id}: cannot remove its runtime directory: {exc}")
    try:
        remove_record(settings.record_dir, job_id)
    except OSError as exc:
        # Not a drain: the job has ended and its id never comes back, so the record can
        # give nobody a GPU (`acbslurm run` also checks the caller descends from the
        # job's slurmstepd). But the next prolog cannot write either: said loudly.
        say(
            "error",
            f"job {job_id}: its record stays in {settings.record_dir} ({exc.strerror}); "
            "the next prolog on this node will fail the same way: fix the directory",
        )
    if problems:
        for problem in problems:
            say("error", f"job {job_id}: {problem}")
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
    say("error", f"job {job_id}: {problem}")
    return []


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
        hosts = docker_hosts(settings, uid, user)
    except ConfigError as exc:
        return [f"{exc}: its containers cannot be swept"]
    result = sweep_job_containers(job_id, hosts, settings.hook_docker_timeout)
    if result.failures:
        time.sleep(0.5)  # one retry: a daemon may have been busy
        result = sweep_job_containers(job_id, hosts, settings.hook_docker_timeout)
    if result.removed:
        say("info", f"job {job_id}: removed containers {','.join(result.removed)}")
    problems = list(result.failures)
    if result.unreachable and uid >= 0:
        # "Connection refused" says nothing about the containers: they outlive their
        # daemon under containerd-shim. Find them without it.
        devices = gpu_files(settings, env, minors)
        problems += _after_unreachable(
            job_id, uid, user, devices, result.unreachable, settings, had_socket
        )
    if uid >= 0 and not result.unreachable:
        sweep_earlier_jobs(uid, hosts, settings)
    return problems


# complexity: one flow: kill what the daemon left, say it, and keep the job for the
# next sweep; each branch a case of "nothing to sweep" or a problem found.
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
    the job for the next sweep; what may still run. A user with no daemon at all (no
    socket file now, none when the job started) and no container processes has nothing
    to sweep: nothing said, nothing kept (else every job of a user without Docker would
    warn and grow ``unswept/<uid>`` for ever). A daemon stopped gracefully during the job
    removes its socket but keeps the job's stopped containers: those are remembered."""
    from acbslurm.hooks.orphans import device_holders, kill_job_processes, remember_unswept

    sockets = had_socket or any(socket_exists(h) for h in unreachable)
    killed, left = kill_job_processes(job_id, uid, user)
    problems = [f"container processes {left} survived SIGKILL"] if left else []
    # With the fence on, holders are killed after the permission goes (_fence_at_end).
    holders = device_holders([] if settings.gpu_fence else devices, uid, user)
    if holders:
        problems.append(f"processes {holders} of {user or uid} still hold the job's GPUs")
    if not sockets and not killed and not problems:
        return []
    say("warning", f"job {job_id}: no Docker daemon answers at {', '.join(unreachable)}")
    if killed:
        pids = ",".join(map(str, killed))
        say("warning", f"job {job_id}: killed its container processes {pids} without Docker")
    try:
        remember_unswept(settings.record_dir, uid, job_id)
    except OSError as exc:
        say("warning", f"job {job_id}: cannot note its containers for removal: {exc}")
    return problems


# complexity: one flow: revoke, find the files now closed to the user, kill what still
# holds one; each branch is a case where there is nothing to revoke or kill.
def _fence_at_end(
    job_id: str, uid: int, user: str, minors: list[int], settings: Settings, env: Mapping[str, str]
) -> list[str]:
    """The job's users lose its GPU files (unless another running job of theirs holds
    one), then every process of the user (or a subuid) still holding one is killed: an
    open file outlives the permission that let it be opened. What may still hold one."""
    if not settings.gpu_fence:
        return []
    try:
        fence(settings, env, drop=job_id)
    except (AcbslurmError, OSError) as exc:
        return [f"GPU fence: {exc}"]
    if uid < 0 or not minors:
        return []
    from acbslurm.gpu.fence import read_acl
    from acbslurm.hooks.orphans import kill_device_holders

    gone = []
    for path in gpu_files(settings, env, minors):
        try:
            if not read_acl(path).user_perm(uid):
                gone.append(path)
        except (OSError, ValueError):
            continue  # no such file here (the /dev/nvidiaN name on the sandbox)
    killed, left = kill_device_holders(gone, uid, user)
    if killed:
        pids = ",".join(map(str, killed))
        say("warning", f"job {job_id}: killed processes {pids} still holding its GPUs")
    if left:
        return [f"processes {left} of {user or uid} still hold the job's GPUs after SIGKILL"]
    return []


def _stop_cgroup_helper(settings: Settings, job_id: str) -> None:
    from acbslurm.cgroups.helper import stop

    try:
        stop(settings.record_dir, job_id, settings.job_runtime_dir)
    except OSError as exc:
        say("warning", f"job {job_id}: cannot end its cgroup helper: {exc}")


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
    if keep_history(job_id, uid, node, folder, settings.record_dir, gpus, say) or has_pending(
        settings.record_dir
    ):
        # The Slurm clients found from here: the sender's parent is no longer slurmd.
        first = pending_name(job_id, node)
        _start_sender({**os.environ, "ACBSLURM_SLURM_BIN_DIR": bin_dir(settings, env)}, first)


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
        "from acbslurm.hooks.epilog import history_sender_main as m; sys.exit(m())"
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

    from acbslurm.hooks.usage import send_pending

    try:
        settings = load_settings()
    except AcbslurmError as exc:
        say("error", f"{exc} (the kept job records are not sent)")
        return 0

    @functools.cache
    def slurm() -> str:
        return bin_dir(settings, env)

    send_pending(settings.record_dir, slurm, say, first=env.get(SENDER_FIRST, ""))
    return 0


def _drain(env: Mapping[str, str], settings: Settings, reason: str) -> None:
    """Drain this node with a reason that names the job (Slurm's own says "Epilog error")."""
    from acbslurm.errors import CommandError
    from acbslurm.gpu.node import node_name
    from acbslurm.slurm.drain import drain_node

    node = node_name(env)
    try:
        drain_node(node, reason, timeout=5, bin_dir=bin_dir(settings, env))
    except CommandError as exc:
        say("error", f"cannot drain {node} with a reason ({exc}); Slurm drains it anyway")
