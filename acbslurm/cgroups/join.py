"""Move a job's freshly created container into the cgroups of the job step that asked.

Runs as root in the job's cgroup helper (``helper.py``), for one request of the job's
user. The container's first process exists but has run nothing of the user's yet: the
OCI runtime has created it and not started it (``runtime.py`` asks between the two), so
every process the container ever has is born inside the job's cgroups, whatever user
the image runs as.

What is checked, each refusal a ``CgroupJoinError`` that names the rule:
- the asker (SO_PEERCRED) is the job's user;
- ``run_pid`` (the `acbslurm run` that creates the container) is the job's user's and a
  process of this job (a root-owned ``slurmstepd: [JOB.x]`` among its parents), so its
  cgroups are the job step's: that is where the container goes;
- ``container_pid`` is the first process of a rootless container of the job's user: in
  a user namespace the job's user owns (not the machine's), in a pid namespace of its
  own (not a plain process), running as a uid that namespace maps (the user's own, or
  one of its subordinate ids when the image runs as another user), and in no cgroup of
  any Slurm job;
- the process moved is the one checked: a pidfd taken before the checks must still
  name a live process, of the same start time, just before the move (a pid reused
  meanwhile is refused, nothing moved) and after it (else whatever process has the pid
  then goes back to the cgroups it was in just before: the pid was reused between the
  check and the move).

A ``docker exec`` into such a container has no create and start: runc starts the
process at once. So the runtime asks for itself (``join_asker``) before it becomes
runc's ``exec``: the process that connected (SO_PEERCRED, never a pid the request
names), the job's user's, inside that user's daemon (a user namespace the user owns),
in no job yet, goes into the step's cgroups, and runc and the exec'd process are born
there. A user can move only that very process, and only into their own job, which
constrains it more and gives it nothing the job's user does not have.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import struct
from collections.abc import Callable

from acbslurm.cgroups.membership import ROOT, Membership, memberships, mount_points, procs_file
from acbslurm.errors import CgroupJoinError
from acbslurm.procfs import read_bytes, real_uid, start_time, stepd_job_of_ancestors
from acbslurm.units import is_ascii_int
from acbslurm.values import frozen

# ioctl(2) on a namespace file: the uid that owns a user namespace (linux/nsfs.h).
NS_GET_OWNER_UID = 0xB704


@frozen
class Joined:
    """What a join did: the cgroup.procs files the container's pid was written to."""

    pid: int
    files: tuple[str, ...]


def owner_of_user_ns(pid: int) -> int:
    """The uid that created ``pid``'s user namespace (0 for the machine's own)."""
    fd = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    try:
        buf = fcntl.ioctl(fd, NS_GET_OWNER_UID, b"\0" * 4)
    finally:
        os.close(fd)
    return int(struct.unpack("I", buf)[0])


def _ns_id(pid: int, kind: str) -> str:
    try:
        return os.readlink(f"/proc/{pid}/ns/{kind}")
    except OSError:
        return ""


def _mapped(uid: int, uid_map: str) -> bool:
    """Is ``uid`` one of the host uids a user namespace maps (its ``uid_map``: inside,
    outside, count)? The user's own and its subordinate ids, as newuidmap set them."""
    for line in uid_map.splitlines():
        parts = line.split()
        if len(parts) == 3 and all(is_ascii_int(p) for p in parts):
            outside, count = int(parts[1]), int(parts[2])
            if outside <= uid < outside + count:
                return True
    return False


def in_a_slurm_job(path: str) -> bool:
    """Is a cgroup path inside a Slurm job's cgroups? Slurm names them ``job_<id>``
    (every release on v1; v2 up to 25.11, and 26.05 with ``CgroupJobIdPaths=yes``),
    ``step_``/``task_`` below, and on v2 keeps them under ``slurmstepd.scope``
    (26.05 names the job by its SLUID there: the scope tells)."""
    parts = [p for p in path.split("/") if p]
    return any(p.startswith(("job_", "step_", "task_")) or p == "slurmstepd.scope" for p in parts)


def targets(run_pid: int, own: list[Membership]) -> list[Membership]:
    """The hierarchies where ``run_pid`` is in a cgroup of its own job: those where it is
    not where this helper (started by slurmd, outside every job) is."""
    here = {(m.hierarchy, m.controllers): m.path for m in own}
    out = []
    for m in memberships(run_pid):
        if m.path == ROOT or here.get((m.hierarchy, m.controllers)) == m.path:
            continue
        if in_a_slurm_job(m.path):
            out.append(m)
    return out


def check_asker(peer_uid: int, job_uid: int) -> None:
    if peer_uid != job_uid:
        raise CgroupJoinError(
            f"refused: uid {peer_uid} asked to move a container into a job of uid {job_uid}"
        )


def check_run_process(run_pid: int, job_id: str, job_uid: int) -> None:
    """``run_pid`` is the job user's and a process of job ``job_id``."""
    uid = real_uid(read_bytes(f"/proc/{run_pid}/status"))
    if uid < 0:
        raise CgroupJoinError(f"refused: process {run_pid} (the asking `acbslurm run`) is gone")
    if uid != job_uid:
        raise CgroupJoinError(
            f"refused: process {run_pid} belongs to uid {uid}, not to the job's user {job_uid}"
        )
    found = stepd_job_of_ancestors(run_pid)
    if found != job_id:
        where = "" if found is None else f"; it is in job {found}"
        raise CgroupJoinError(
            f"refused: process {run_pid} is not part of job {job_id} "
            f"(no slurmstepd of that job among its parents{where})"
        )


def check_container(pid: int, job_uid: int) -> None:
    """``pid`` is a rootless container's first process, of the job's user, in no job."""
    # The helper runs in the machine's user namespace (slurmd's): the container must not.
    check_in_users_daemon(pid, job_uid, "container")
    if _ns_id(pid, "pid") in ("", _ns_id(os.getpid(), "pid")):
        raise CgroupJoinError(
            f"refused: process {pid} is not a container's (no pid namespace of its own)"
        )


def check_in_users_daemon(pid: int, job_uid: int, what: str = "Docker") -> None:
    """``pid`` runs inside the job's user's rootless daemon (a user namespace that user
    owns, not the machine's), as a uid that namespace maps, in no job's cgroup."""
    try:
        owner = owner_of_user_ns(pid)
    except OSError as exc:
        raise CgroupJoinError(f"refused: process {pid}: {exc.strerror}") from None
    if _ns_id(pid, "user") in ("", _ns_id(os.getpid(), "user")) or owner != job_uid:
        raise CgroupJoinError(
            f"refused: process {pid} is not in a rootless {what} of uid {job_uid} "
            f"(its user namespace belongs to uid {owner})"
        )
    uid = real_uid(read_bytes(f"/proc/{pid}/status"))
    if not _mapped(uid, read_bytes(f"/proc/{pid}/uid_map").decode(errors="replace")):
        raise CgroupJoinError(
            f"refused: process {pid} runs as uid {uid}, which its user namespace does not map"
        )
    held = [m.path for m in memberships(pid) if in_a_slurm_job(m.path)]
    if held:
        raise CgroupJoinError(
            f"refused: process {pid} is already in a Slurm job's cgroup {held[0]}"
        )


def join(job_id: str, job_uid: int, peer_uid: int, run_pid: int, container_pid: int) -> Joined:
    """Every check above, then the move; raises ``CgroupJoinError`` with nothing moved
    when a check fails."""

    def checks() -> None:
        check_run_process(run_pid, job_id, job_uid)
        check_container(container_pid, job_uid)

    return _checked_move(job_id, job_uid, peer_uid, run_pid, container_pid, checks)


def join_asker(job_id: str, job_uid: int, peer_uid: int, peer_pid: int, run_pid: int) -> Joined:
    """The runtime of an exec, the process that asks (``peer_pid``, from the kernel),
    into the cgroups of job step ``run_pid``; ``CgroupJoinError`` with nothing moved when
    a check fails."""

    def checks() -> None:
        check_in_users_daemon(peer_pid, job_uid)
        check_run_process(run_pid, job_id, job_uid)

    return _checked_move(job_id, job_uid, peer_uid, run_pid, peer_pid, checks)


def _checked_move(
    job_id: str, job_uid: int, peer_uid: int, run_pid: int, pid: int, checks: Callable[[], None]
) -> Joined:
    """``pid`` into the cgroups of job step ``run_pid`` once the asker is the job's user
    and ``checks`` pass, the process held by a pidfd from before the checks (a pid
    reused meanwhile is refused)."""
    check_asker(peer_uid, job_uid)
    try:
        pidfd = os.pidfd_open(pid)
    except OSError as exc:
        raise CgroupJoinError(f"refused: process {pid}: {exc.strerror}") from None
    try:
        born = start_time(pid)
        checks()
        goal = targets(run_pid, memberships(os.getpid()))
        if not goal:
            raise CgroupJoinError(
                f"job {job_id} has no cgroups of its own here (is "
                "ProctrackType=proctrack/cgroup or TaskPlugin=task/cgroup set in slurm.conf?)"
            )
        return Joined(pid, tuple(_move(pidfd, pid, born, goal)))
    finally:
        os.close(pidfd)


def _move(pidfd: int, pid: int, born: str, goal: list[Membership]) -> list[str]:
    """``pid`` into each cgroup of ``goal``, checked just before to be still the process
    held by ``pidfd`` (started at ``born``), and again after: a pid reused in between
    names another process, which must not stay in the job (Slurm kills what is in a
    job's cgroups when it ends), so on any failure once a write is made, whatever has
    the pid goes back to the cgroups it was in. The cgroup.procs files written."""
    mounts = mount_points()
    files = [_procs_file(mounts, m) for m in goal]
    _same_process(pidfd, pid, born, "before")
    # The cgroup.procs files of the cgroups pid is in now, in goal's hierarchies ("" where
    # it is in none); read after the check: the process then named by pid.
    now = {(m.hierarchy, m.controllers): m for m in memberships(pid)}
    member = [now.get((m.hierarchy, m.controllers)) for m in goal]
    back = [(procs_file(mounts, m) or "") if m else "" for m in member]
    done = 0
    try:
        for path in files:
            _write_pid(path, pid)
            done += 1
        _same_process(pidfd, pid, born, "while")
    except CgroupJoinError:
        for path in filter(None, back[:done]):
            with contextlib.suppress(CgroupJoinError):  # gone: nothing to move back
                _write_pid(path, pid)
        raise
    return files


def _procs_file(mounts: dict[str, str], m: Membership) -> str:
    path = procs_file(mounts, m)
    if path is None:
        raise CgroupJoinError(f"the {m.controllers or 'cgroup2'} hierarchy is not mounted here")
    return path


def _same_process(pidfd: int, pid: int, born: str, when: str) -> None:
    """``pid`` still names the process of ``pidfd``: it has not ended (a zombie keeps
    its pid) and has the start time it had at the checks."""
    try:
        signal.pidfd_send_signal(pidfd, 0)
    except OSError:
        raise CgroupJoinError(f"process {pid} ended {when} it was moved") from None
    if start_time(pid) != born:
        raise CgroupJoinError(f"process {pid} was replaced {when} it was moved")


def _write_pid(path: str, pid: int) -> None:
    """Move ``pid`` into the cgroup of ``path``; CgroupJoinError naming it when refused."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, str(pid).encode())
        finally:
            os.close(fd)
    except OSError as exc:
        raise CgroupJoinError(f"cannot move process {pid} into {path}: {exc.strerror}") from None
