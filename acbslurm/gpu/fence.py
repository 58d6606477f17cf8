"""The GPU fence: a user may open a GPU's device file only while a job of theirs holds it.

With the fence installed (``gpu_fence`` setting; device files 0660/0600 root:root, no
world access, docs/admin-guide.md "GPU fence"), every prolog and epilog reconciles each
GPU device file of the node: its named-user ACL entries (gpu/acl.py) become exactly the
users of the jobs whose record is on this node and still running, with ``rw``; every
other named user is removed. So a prolog or epilog that failed, or a slurmd that died,
leaves a GPU open at most until the node's next hook. Named groups (an admin's own) are
kept as they are; the base entries (owner, group, other) are never changed.

Liveness of a record (docs/design.md, "Why the GPU fence is an ACL"): a slurmstepd of the job
runs on this machine (read from /proc, with or without cgroups); a record without one
(an allocation with no step yet, or a job whose epilog never ran) is asked about once,
for all such records together, with ``squeue``: running there is kept.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat

from acbslurm.errors import AcbslurmError
from acbslurm.gpu.acl import XATTR, Acl, AclError, decode, encode, from_mode
from acbslurm.gpuvalue import minors as known_minors
from acbslurm.jobrecord import JOB_ID, JobRecord, read_trusted_record
from acbslurm.values import field, mutable

TYPE_CHECKING = False  # a lean-path module: CONTRIBUTING.md, "Lean imports"
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from acbslurm.config import Settings

NVIDIA_MAJOR = 195
# nvidia-modeset (254) and nvidiactl (255) share the major: every CUDA process needs
# them, and they reach no GPU by themselves, so the fence leaves them alone.
FIRST_SHARED_MINOR = 254
RW = 6
_PER_GPU_NAME = re.compile(r"^nvidia[0-9]+$")  # not nvidiactl, nvidia-uvm, nvidia-caps/
_RECORD_FILE = re.compile(r"^([0-9]+(?:_[0-9]+)?)\.json$")


def gpu_minor(path: str) -> int | None:
    """The minor of ``path`` when it is a per-GPU NVIDIA character device, else None.
    lstat: a link is not followed (an ACL set through it would land elsewhere)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISCHR(st.st_mode) or os.major(st.st_rdev) != NVIDIA_MAJOR:
        return None
    minor = os.minor(st.st_rdev)
    return minor if minor < FIRST_SHARED_MINOR else None


def node_gpu_files(settings: Settings, node: str) -> dict[str, int]:
    """Every per-GPU device file of the node the fence knows: ``/dev/nvidiaN``, the
    gres.conf ``File=`` lines of ``node`` and the static inventory's ``device`` (the
    sandbox's emulated GPUs live outside /dev); path -> minor."""
    from acbslurm.gpu.gres_conf import gpu_device_files

    try:  # not glob: its import costs the hooks a millisecond
        names = os.listdir("/dev")
    except OSError:
        names = []
    paths = [f"/dev/{n}" for n in names if _PER_GPU_NAME.match(n)]
    with contextlib.suppress(AcbslurmError, OSError):  # AutoDetect, or no gres.conf
        paths += gpu_device_files(settings.gres_conf, node)
    if settings.gpu_inventory:
        from acbslurm.gpu.inventory import load_static

        with contextlib.suppress(AcbslurmError, OSError):
            paths += [g.device for g in load_static(settings.gpu_inventory) if g.device]
    out: dict[str, int] = {}
    for path in paths:
        minor = gpu_minor(path)
        if minor is not None:
            out[path] = minor
    return out


def node_records(record_dir: str, node: str) -> tuple[list[JobRecord], list[str]]:
    """The trusted job records of ``node`` (root-owned, written by root alone), and why
    each other one was left out: an untrusted record grants nothing."""
    records: list[JobRecord] = []
    skipped: list[str] = []
    try:
        names = os.listdir(record_dir)
    except FileNotFoundError:
        return records, skipped
    for name in sorted(names):
        m = _RECORD_FILE.match(name)
        if not m or not JOB_ID.match(m.group(1)):
            continue
        try:
            rec = read_trusted_record(record_dir, m.group(1))
        except AcbslurmError as exc:
            skipped.append(str(exc))
            continue
        if rec is not None and rec.node == node and rec.uid >= 0:
            records.append(rec)
    return records, skipped


def stepd_jobs(proc: str = "/proc") -> set[str]:
    """The job ids with a slurmstepd on this machine (any step, the extern one too).

    Root's only: any user can name a process ``slurmstepd`` and give it the title
    ``slurmstepd: [N.0]``, which would keep job N's GPUs open to its user for as long as
    the process runs; no user can start a process whose real uid is 0."""
    from acbslurm.procfs import read_bytes, real_uid, stepd_job
    from acbslurm.units import is_ascii_int

    jobs = set()
    for entry in os.listdir(proc):
        if not is_ascii_int(entry) or read_bytes(f"{proc}/{entry}/comm") != b"slurmstepd\n":
            continue
        job = stepd_job(read_bytes(f"{proc}/{entry}/cmdline"))
        if job and real_uid(read_bytes(f"{proc}/{entry}/status")) == 0:
            jobs.add(job)
    return jobs


# The states in which the fence keeps a job's GPUs open to its user. Not
# slurm.states.HOLDING_STATES (the jobs holding an allocation): a CONFIGURING job (its
# prolog running) has its GPUs already; COMPLETING is the epilog's time to take them back.
GPU_OPEN_STATES = frozenset({"RUNNING", "CONFIGURING", "SUSPENDED"})


def slurm_running_jobs(node: str, bin_dir: str, timeout: float = 5.0) -> set[str] | None:
    """The jobs slurmctld says hold ``node`` now; None when it does not answer."""
    from acbslurm.slurm.commands import slurm

    argv = ["squeue", "-h", "-w", node, "-t", "all", "-o", "%A %T"]
    try:
        out = slurm(argv, timeout=timeout, bin_dir=bin_dir, controller=True).stdout
    except AcbslurmError:
        return None
    jobs = set()
    for line in out.splitlines():
        job, _, state = line.strip().partition(" ")
        if state.strip() in GPU_OPEN_STATES:
            jobs.add(job)
    return jobs


@mutable
class Liveness:
    """Decides which records still hold their GPUs: ``keep`` (the prolog's own job)
    always, ``drop`` (the epilog's) never, a job with a slurmstepd here yes; the rest
    from ``ask`` (slurmctld), called at most once; when it cannot answer, kept (the
    record says Slurm gave the GPUs; the next hook decides again)."""

    keep: str = ""
    drop: str = ""
    stepds: Callable[[], set[str]] = stepd_jobs
    ask: Callable[[], set[str] | None] = lambda: None
    unknown: bool = False
    _stepds: set[str] | None = field(default=None, repr=False)
    _asked: set[str] | None = field(default=None, repr=False)
    _did_ask: bool = field(default=False, repr=False)

    def alive(self, job_id: str) -> bool:
        if job_id == self.drop:
            return False
        if job_id == self.keep:
            return True
        if self._stepds is None:
            self._stepds = self.stepds()
        if job_id.partition("_")[0] in self._stepds:
            return True
        if not self._did_ask:
            self._asked, self._did_ask = self.ask(), True
        if self._asked is None:
            self.unknown = True
            return True
        return job_id in self._asked


def allowed_users(
    files: dict[str, int], records: Iterable[JobRecord], alive: Callable[[str], bool]
) -> dict[str, set[int]]:
    """Each GPU file's users: those of the live records holding its minor."""
    by_minor: dict[int, set[int]] = {}
    for rec in records:
        if rec.gpus and alive(rec.job_id):
            for minor in known_minors(rec.gpus):
                by_minor.setdefault(minor, set()).add(rec.uid)
    return {path: by_minor.get(minor, set()) for path, minor in files.items()}


def fenced(current: Acl, uids: set[int]) -> Acl:
    """``current`` with exactly ``uids`` as named users, each ``rw``."""
    return current.with_users(dict.fromkeys(uids, RW))


def read_acl(path: str) -> Acl:
    """The file's access ACL (its mode's when it has none); AclError, OSError."""
    try:
        return decode(os.getxattr(path, XATTR, follow_symlinks=False))
    except OSError as exc:
        if exc.errno != errno.ENODATA:
            raise
    return from_mode(os.lstat(path).st_mode)


def write_acl(path: str, acl: Acl) -> None:
    os.setxattr(path, XATTR, encode(acl), follow_symlinks=False)


@mutable
class FenceResult:
    granted: list[str] = field(default_factory=list)  # "path:uid"
    revoked: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # path -> why


def reconcile(
    allowed: dict[str, set[int]],
    read: Callable[[str], Acl] = read_acl,
    write: Callable[[str, Acl], None] = write_acl,
) -> FenceResult:
    """Make each file's named users exactly ``allowed[path]``; writes only what differs."""
    result = FenceResult()
    for path, uids in sorted(allowed.items()):
        try:
            current = read(path)
            want = fenced(current, uids)
            if want == current:
                continue
            write(path, want)
        except (OSError, AclError) as exc:
            result.failed[path] = getattr(exc, "strerror", None) or str(exc)
            continue
        had = {uid for uid, _ in current.users}
        result.granted += [f"{path}:{u}" for u in sorted(uids - had)]
        result.revoked += [f"{path}:{u}" for u in sorted(had - uids)]
    return result


def fence_node(settings: Settings, node: str, liveness: Liveness) -> tuple[FenceResult, list[str]]:
    """Reconcile every GPU file of ``node``; the result and what was said about records."""
    import fcntl

    files = node_gpu_files(settings, node)
    # One reconcile at a time on the node: two hooks that each read a file's ACL and
    # write their own view back could otherwise undo each other's grant or revoke. The
    # lock is the record directory itself (flock on a directory descriptor): no file to
    # create, so a full or read-only directory locks too.
    try:
        lock = os.open(settings.record_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        lock = -1  # no record directory (yet): no record grants anything to race over
    try:
        if lock >= 0:
            fcntl.flock(lock, fcntl.LOCK_EX)  # the hook's deadline bounds the wait
        records, notes = node_records(settings.record_dir, node)
        result = reconcile(allowed_users(files, records, liveness.alive))
    finally:
        if lock >= 0:
            os.close(lock)
    if liveness.unknown:
        notes.append("slurmctld did not answer: records without a slurmstepd were kept")
    return result, notes
