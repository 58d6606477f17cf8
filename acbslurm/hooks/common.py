"""What Slurm's prolog, epilog and task prolog share: messages, the deadline, the job's
user, the Slurm clients' folder, the GPU fence, the job's GPU files and its Docker daemons.

slurmd waits for the hooks on every job, so this imports only what each of them needs
(no click, no Docker SDK, no typing at run time: tests/unit/hooks/test_hooks_imports.py);
what one path alone needs is imported where it is used.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping

from acbslurm.errors import AcbslurmError, ConfigError
from acbslurm.units import is_ascii_int

TYPE_CHECKING = False  # a lean-path module: CONTRIBUTING.md, "Lean imports"
if TYPE_CHECKING:
    from acbslurm.config import Settings
    from acbslurm.hooks.jobmap import MapDirs

_NAME = "acbslurm"
_SYSLOG_OPEN = ""
# syslog priorities (syslog.LOG_ERR etc., spelled out: the module is imported on first use).
_PRIORITY = {"error": 3, "warning": 4, "info": 6}

# A hook never hangs: past this many seconds it gives up with a message (before Slurm's
# own PrologEpilogTimeout would kill it silently). Every Docker and Slurm call has its own,
# shorter timeout; this also bounds what has none (a hung NVML driver, a stuck file system).
HOOK_DEADLINE_S = 30


def say(level: str, msg: str) -> None:
    """One line on stderr and in syslog (no logging import: it costs every job).

    slurmd writes a hook's output to its log only at debug levels, or with the exit
    code when the hook failed; syslog (facility daemon, tag ``acbslurm-prolog`` etc.)
    keeps every line. With no syslog daemon (no /dev/log) the C library drops it.
    """
    print(f"{_NAME}: {level}: {msg}", file=sys.stderr)
    to_syslog(level, msg)


def to_syslog(level: str, msg: str) -> None:
    global _SYSLOG_OPEN
    import syslog

    if _SYSLOG_OPEN != _NAME:
        syslog.openlog(_NAME, syslog.LOG_PID, syslog.LOG_DAEMON)
        _SYSLOG_OPEN = _NAME
    try:
        syslog.syslog(_PRIORITY.get(level, 6), f"{level}: {msg}")
    except (OSError, ValueError):  # a NUL in a message, a full log socket: stderr has it
        return


def with_deadline(name: str, fn: Callable[[Mapping[str, str]], int], on_timeout: int) -> int:
    """``fn(os.environ)`` as hook ``name`` (its syslog tag ``acbslurm-<name>``), ended
    with ``on_timeout`` past HOOK_DEADLINE_S."""
    global _NAME
    import signal

    def expired(_signum: int, _frame: object) -> None:
        say("error", f"{name} did not finish within {HOOK_DEADLINE_S} s: giving up")
        # os._exit: no cleanup that could hang too.
        os._exit(on_timeout)

    _NAME = f"acbslurm-{name}"
    signal.signal(signal.SIGALRM, expired)
    signal.alarm(HOOK_DEADLINE_S)
    try:
        return fn(os.environ)
    finally:
        signal.alarm(0)


def user_of(env: Mapping[str, str]) -> tuple[int, str]:
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


def bin_dir(settings: Settings, env: Mapping[str, str]) -> str:
    from acbslurm.slurm.binaries import slurm_bin_dir

    return slurm_bin_dir(settings.slurm_bin_dir, env.get("SLURM_CONF") or settings.slurm_conf)


def map_dirs(settings: Settings) -> MapDirs:
    """Where the GPU-to-job files for monitoring go (hooks/jobmap.py; off when unset)."""
    from acbslurm.hooks.jobmap import MapDirs

    return MapDirs(settings.record_dir, settings.dcgm_job_mapping_dir, settings.gpustat_dir)


class FenceError(AcbslurmError):
    """The job's own GPU files could not be opened to its user: the job would run
    without the GPUs Slurm gave it."""


def fence(
    settings: Settings,
    env: Mapping[str, str],
    keep: str = "",
    drop: str = "",
    must: tuple[str, ...] = (),
) -> None:
    """Reconcile the node's GPU files with its running jobs (gpu/fence.py), when the
    fence is on, and say what changed; FenceError when one of ``must`` (the prolog's own
    GPUs) failed."""
    if not settings.gpu_fence:
        return
    from acbslurm.gpu.fence import Liveness, fence_node, slurm_running_jobs
    from acbslurm.gpu.node import node_name

    node = node_name(env)
    slurm = bin_dir(settings, env)
    live = Liveness(keep=keep, drop=drop, ask=lambda: slurm_running_jobs(node, slurm))
    result, notes = fence_node(settings, node, live)
    for note in notes:
        say("warning", f"GPU fence: {note}")
    changes = [f"+{g}" for g in result.granted] + [f"-{r}" for r in result.revoked]
    if changes:
        say("info", f"GPU fence: {' '.join(changes)}")
    for path, why in result.failed.items():
        say("error", f"GPU fence: cannot set the ACL of {path}: {why}")
    bad = [p for p in must if p in result.failed]
    if bad:
        raise FenceError(f"the job's GPU files {', '.join(bad)} cannot be opened to its user")


def gpu_files(settings: Settings, env: Mapping[str, str], minors: list[int]) -> list[str]:
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


def docker_hosts(settings: Settings, uid: int, user: str) -> list[tuple[str, int]]:
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


def socket_exists(host: str) -> bool:
    """Whether a daemon's socket file is there (a crashed daemon leaves its own). Not
    dockerapi.engine's socket_path: importing the client costs the prolog milliseconds."""
    if host.startswith("unix://"):
        return os.path.lexists(host[len("unix://") :])
    if host.startswith("/"):
        return os.path.lexists(host)
    return True  # not a unix socket: it cannot be told absent


def sweep_earlier_jobs(uid: int, hosts: list[tuple[str, int]], settings: Settings) -> None:
    """Remove the containers of this user's jobs whose daemon was unreachable before."""
    from acbslurm.hooks.orphans import forget_unswept, unswept
    from acbslurm.hooks.sweep import sweep_job_containers

    for old in unswept(settings.record_dir, uid):
        result = sweep_job_containers(old, hosts, settings.hook_docker_timeout)
        if result.failures or result.unreachable:
            continue
        if result.removed:
            say("info", f"job {old}: removed containers {','.join(result.removed)} (left over)")
        try:
            forget_unswept(settings.record_dir, uid, [old])
        except OSError as exc:
            say("warning", f"job {old}: {exc}")
