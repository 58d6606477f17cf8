"""The GPU-to-job files a site's GPU monitoring reads (docs/admin-guide.md, "Monitoring").

Two settings, each off when empty:

- ``dcgm_job_mapping_dir``: NVIDIA dcgm-exporter's ``--hpc-job-mapping-dir``. A file per
  GPU named by its NVML index (``0``, what DCGM calls the GPU), holding the ids of the
  jobs on it, one per line: dcgm-exporter copies each GPU metric once per line with an
  ``hpc_job`` label, and reads only files whose whole name is a number. The same lines
  in a file named by the GPU's UUID (``GPU-...``), as NVIDIA Fleet Intelligence reads
  them. A MIG device's jobs go into its parent's index file and its own UUID file.
- ``gpustat_dir``: Princeton jobstats' GPU exporter reads ``<dir>/<UUID>``, else
  ``<dir>/<NVML index>``: one line ``JOBID UID``. Its parser takes one job, so a GPU that
  two jobs share shows the one that started first, then the next when that one ends.

The index is NVML's (the inventory's), never Slurm's GRES index or the device minor,
which differ on nodes whose PCI order is not the device files' order. A job is named by
SLURM_JOB_ID, the raw id (an array task's own id), as both tools' own prolog scripts do.

Each job's GPUs are kept in ``<record_dir>/jobmap/<job>.json``. A hook takes an exclusive
lock (``flock`` on ``<record_dir>/jobmap/.lock``), changes its job's file and rewrites the
files of the GPUs that change from every job's: two hooks on one GPU at once never lose
a line, and an epilog removes its job's lines only. A job whose record is gone (its
epilog never ran: slurmd killed) is dropped by the next hook of a job with GPUs (a job
without any takes no lock). Files are replaced by a rename (a reader sees the old or the
new one whole) of a temporary file whose name is no number and starts with a dot
(dcgm-exporter skips it), in a directory that must be root's and writable by root
alone, never through a link.

On the hook path: standard library only, no typing at run time
(tests/unit/hooks/test_hooks_imports.py).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import time

from acbslurm.errors import ConfigError

TYPE_CHECKING = False  # a lean-path module: CONTRIBUTING.md, "Lean imports"
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

STATE = "jobmap"
LOCK = ".lock"
LOCK_WAIT = 5.0  # seconds a hook waits for another's lock (each holds it for milliseconds)
MAX_STATE = 64 << 10  # bytes of one job's state file


class MapDirs:
    """Where the files go: the record directory (the state) and the two settings."""

    __slots__ = ("dcgm", "gpustat", "record_dir")

    def __init__(self, record_dir: str, dcgm: str = "", gpustat: str = "") -> None:
        self.record_dir = record_dir
        self.dcgm = dcgm
        self.gpustat = gpustat

    @property
    def on(self) -> bool:
        return bool(self.dcgm or self.gpustat)


def add_job(dirs: MapDirs, job_id: str, uid: int, gpus: Sequence[tuple[int | None, str]]) -> None:
    """Job ``job_id`` (of ``uid``) holds ``gpus`` (NVML index or None, UUID) now; a job
    with no GPUs is dropped (a requeued run that got none)."""
    if not dirs.on or not (gpus or _has_state(dirs, job_id)):
        return  # a job without GPUs, as most are on a CPU node: no lock taken
    state = {"job": job_id, "uid": uid, "t": time.time(), "gpus": [list(g) for g in gpus]}
    _update(dirs, job_id, state if gpus else None)


def drop_job(dirs: MapDirs, job_id: str) -> None:
    """Job ``job_id``'s lines out of every file (the other jobs' stay)."""
    if dirs.on and _has_state(dirs, job_id):
        _update(dirs, job_id, None)


def _has_state(dirs: MapDirs, job_id: str) -> bool:
    return os.path.exists(os.path.join(dirs.record_dir, STATE, f"{job_id}.json"))


# -- the names and lines -------------------------------------------------------------


def _names(gpus: Iterable[Sequence[object]], gpustat: bool) -> set[str]:
    """The file names of ``gpus``: UUIDs, and NVML indices (jobstats': whole GPUs only;
    it looks a MIG device up by its UUID)."""
    out: set[str] = set()
    for index, uuid in gpus:
        out.add(str(uuid))
        if isinstance(index, int) and not (gpustat and str(uuid).startswith("MIG-")):
            out.add(str(index))
    return out


def _holders(states: list[dict[str, object]], name: str, gpustat: bool) -> list[dict[str, object]]:
    """The jobs holding GPU ``name``, the earliest first (then by id)."""
    return [s for s in states if name in _names(s["gpus"], gpustat)]  # type: ignore[arg-type]


def dcgm_text(states: list[dict[str, object]], name: str) -> str:
    jobs: list[str] = []
    for s in _holders(states, name, False):
        if str(s["job"]) not in jobs:
            jobs.append(str(s["job"]))
    return "".join(f"{j}\n" for j in jobs)


def gpustat_text(states: list[dict[str, object]], name: str) -> str:
    held = _holders(states, name, True)
    if not held:
        return ""
    first = held[0]
    uid = first["uid"]
    return f"{first['job']} {uid}\n" if isinstance(uid, int) and uid >= 0 else f"{first['job']}\n"


# -- under the lock --------------------------------------------------------------------


def _update(dirs: MapDirs, job_id: str, state: dict[str, object] | None) -> None:
    folder = os.path.join(dirs.record_dir, STATE)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    sfd = _open_dir(folder, "GPU-to-job state directory")
    lock = -1
    try:
        lock = _lock(sfd, folder)
        states, touched = _changed_states(sfd, folder, dirs.record_dir, job_id, state)
        if dirs.dcgm:
            names = sorted(_names(touched, False))
            _rewrite(dirs.dcgm, {n: dcgm_text(states, n) for n in names})
        if dirs.gpustat:
            names = sorted(_names(touched, True))
            _rewrite(dirs.gpustat, {n: gpustat_text(states, n) for n in names})
    finally:
        if lock >= 0:
            os.close(lock)  # releases the lock
        os.close(sfd)


def _changed_states(
    sfd: int, folder: str, record_dir: str, job_id: str, state: dict[str, object] | None
) -> tuple[list[dict[str, object]], list[list[object]]]:
    """Every job's state after ``job_id``'s is ``state`` (None: gone) and stale jobs are
    dropped, the earliest first; and the GPUs whose files that changes."""
    states = _read_states(sfd, record_dir)
    gone = [s for s in states if s["job"] == job_id or s.get("_stale")]
    touched: list[list[object]] = [g for s in gone for g in s["gpus"]]  # type: ignore[attr-defined]
    for s in gone:
        _remove(sfd, f"{s['job']}.json")
    states = [s for s in states if s not in gone]
    if state is not None:
        replace_file(sfd, folder, f"{job_id}.json", json.dumps(state) + "\n", 0o600)
        states.append(state)
        touched += state["gpus"]  # type: ignore[arg-type]
    states.sort(key=lambda s: (float(s["t"]), str(s["job"])))  # type: ignore[arg-type]
    return states, touched


def _lock(dir_fd: int, folder: str) -> int:
    """The state directory's lock file, open and locked exclusively (ConfigError past
    LOCK_WAIT); closing the descriptor releases it."""
    import fcntl

    fd = os.open(LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd)
    deadline = time.monotonic() + LOCK_WAIT
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                raise ConfigError(
                    f"{folder}/{LOCK} stayed locked for {LOCK_WAIT:g} s: "
                    "the GPU-to-job files are not updated"
                ) from None
            time.sleep(0.005)


def _read_states(dir_fd: int, record_dir: str) -> list[dict[str, object]]:
    """Every job's state; one whose job record is gone is marked ``_stale``; one that
    cannot be read is removed (it would stay for ever)."""
    out = []
    for name in os.listdir(dir_fd):
        if not name.endswith(".json") or name.startswith("."):
            continue
        job = name[: -len(".json")]
        try:
            state = _read_state(dir_fd, name, job)
        except (OSError, ValueError):
            _remove(dir_fd, name)
            continue
        if not os.path.exists(os.path.join(record_dir, name)):
            state["_stale"] = True
        out.append(state)
    return out


def _read_state(dir_fd: int, name: str, job: str) -> dict[str, object]:
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
    with os.fdopen(fd, "rb") as fh:
        data = json.loads(fh.read(MAX_STATE))
    bad = ValueError(f"{name}: not a job's GPUs")
    if not isinstance(data, dict) or data.get("job") != job:
        raise bad
    gpus = data.get("gpus")
    if not isinstance(gpus, list) or not all(
        isinstance(g, list) and len(g) == 2 and isinstance(g[1], str) for g in gpus
    ):
        raise bad
    if not isinstance(data.get("t"), (int, float)) or not isinstance(data.get("uid"), int):
        raise bad
    return data


def _remove(dir_fd: int, name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=dir_fd)


def replace_file(dir_fd: int, folder: str, name: str, text: str, mode: int) -> None:
    """``name`` in the directory open as ``dir_fd`` (``folder``) replaced by a file
    holding ``text``: a temporary file (made anew, never through a link) renamed over it."""
    tmp = f".{name}.{os.getpid()}.tmp"
    _remove(dir_fd, tmp)  # left by a killed hook with the same pid
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode, dir_fd=dir_fd)
    try:
        try:
            os.fchmod(fd, mode)  # whatever umask slurmd gives its hooks
            data = text.encode()
            if os.write(fd, data) != len(data):
                raise OSError(f"short write to {os.path.join(folder, tmp)}")
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


def _rewrite(path: str, texts: dict[str, str]) -> None:
    """Each file of ``texts`` in directory ``path`` rewritten to its text, or removed
    where that is empty (an empty dcgm file would take the GPU's metrics away)."""
    fd = _open_dir(path, "GPU-to-job directory")
    try:
        for name, text in texts.items():
            if not text:
                _remove(fd, name)
                continue
            # A file that holds the text already is left alone; none, a link, not a
            # file or an unreadable one is replaced.
            try:
                now = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
            except OSError:
                now = -1
            if now >= 0:
                with os.fdopen(now, "rb") as fh:
                    same = stat.S_ISREG(os.fstat(fh.fileno()).st_mode) and (
                        fh.read(MAX_STATE).decode(errors="replace") == text
                    )
                if same:
                    continue
            replace_file(fd, path, name, text, 0o644)
    finally:
        os.close(fd)


def _open_dir(path: str, what: str) -> int:
    """Directory ``path`` open (made 0755 when missing) if it is root's and no one else
    may write it, checked on the open directory (which cannot be swapped after);
    ConfigError naming it otherwise (a link there is never followed)."""
    if not os.path.isabs(path):
        raise ConfigError(f"{what} {path!r} is not an absolute path")
    with contextlib.suppress(FileExistsError):  # a link or a file there: refused below
        os.makedirs(path, mode=0o755, exist_ok=True)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        link = exc.errno in (errno.ELOOP, errno.ENOTDIR)
        why = "a link or not a directory" if link else exc.strerror
        raise ConfigError(f"{what} {path}: {why}: not written") from None
    st = os.fstat(fd)
    # root's (the hooks run as root; a test as another user: its own)
    if st.st_uid not in (0, os.geteuid()) or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        os.close(fd)
        raise ConfigError(
            f"{what} {path} is not root's or others may write it (owner uid {st.st_uid}, "
            f"mode {stat.S_IMODE(st.st_mode):04o}): not written"
        )
    return fd
