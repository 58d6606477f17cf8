"""The per-job record the prolog writes (who runs the job, which GPUs Slurm gave it) and
the labels of the job's containers: what the hooks write and `acbslurm run` trusts.

``<record_dir>/<jobid>.json``, root-owned, mode 0644 (jobs and ``acbslurm status`` read it;
only root writes it, so it is what ``acbslurm run`` trusts).

The record is a contract between the prolog and ``acbslurm run`` of the same node, which
an upgrade in the middle of a job splits between two releases: it carries a
``version``, a reader takes every earlier version (the first had none: three parallel
GPU lists), and refuses a later one by name rather than guess at its GPUs.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat

from acbslurm.errors import ConfigError
from acbslurm.gpuvalue import Gpu, from_lists
from acbslurm.values import as_dict, frozen

TYPE_CHECKING = False  # a lean-path module: CONTRIBUTING.md, "Lean imports"
if TYPE_CHECKING:
    from typing import Any

# A job id as Slurm prints it: digits, or an array task 12_3.
JOB_ID = re.compile(r"^[0-9]+(_[0-9]+)?$")

# Labels on every container acbslurm starts: the epilog finds a job's containers by them.
JOB_LABEL = "acbslurm.job_id"
USER_LABEL = "acbslurm.user"

# What write_record writes; read_record reads this and every earlier version.
RECORD_VERSION = 2


@frozen
class JobRecord:
    job_id: str
    user: str
    uid: int
    node: str
    gpus: tuple[Gpu, ...] = ()  # Slurm's order (its indices'); each with this node
    cpus: int = 0  # 0: unknown, no limit
    mem_mb: int = 0  # 0: unknown, no limit
    created: float = 0.0
    # Why the prolog could not read the job's CPU/memory allocation ("" when it could):
    # `acbslurm run` then refuses to start a container rather than run it unlimited.
    alloc_error: str = ""
    # Whether the user's Docker socket was there when the job started: an epilog that
    # finds no daemon, no socket and no container process of a job whose user had none
    # either has nothing to sweep later (a user without Docker). True when unknown.
    docker_socket: bool = True

    @property
    def uuids(self) -> list[str]:
        return [g.uuid for g in self.gpus]

    def as_json(self) -> dict[str, Any]:
        """What ``write_record`` writes (``RECORD_VERSION``)."""
        out = as_dict(self)
        out["gpus"] = [g.as_json() for g in self.gpus]
        return {"version": RECORD_VERSION, **out}


def gpu_rows(gpus: tuple[Gpu, ...] | list[Gpu]) -> list[dict[str, int | str | None]]:
    """index/minor/uuid rows of one job's GPUs (`acbslurm gpus`); index None when Slurm
    named UUIDs."""
    return [{"index": g.index, "minor": g.minor, "uuid": g.uuid} for g in gpus]


def check_job_id(job_id: str) -> str:
    """A job id safe to use in a file name (digits, or array form 12_3)."""
    if not JOB_ID.match(job_id):
        raise ConfigError(f"invalid Slurm job id {job_id!r}")
    return job_id


def record_path(record_dir: str, job_id: str) -> str:
    return os.path.join(record_dir, f"{check_job_id(job_id)}.json")


def write_record(record_dir: str, rec: JobRecord) -> str:
    """Write atomically (temp file + rename) so readers never see half a record."""
    os.makedirs(record_dir, mode=0o755, exist_ok=True)
    path = record_path(record_dir, rec.job_id)
    tmp = os.path.join(record_dir, f".{rec.job_id}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)  # left by a killed prolog with the same pid
    # O_EXCL|O_NOFOLLOW: never write through a link planted where the temp file goes
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        try:
            os.fchmod(fd, 0o644)  # independent of the umask slurmd gives us
            data = (json.dumps(rec.as_json()) + "\n").encode()
            if os.write(fd, data) != len(data):
                raise OSError(f"short write to {tmp}")
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):  # a full disk must not keep half a record
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename is None:
            exc.filename = tmp  # os.write's ENOSPC names no file: say where
        raise
    return path


def read_record(record_dir: str, job_id: str) -> JobRecord | None:
    """The record of ``job_id``, or None when there is none."""
    path = record_path(record_dir, job_id)
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"job record {path} is unreadable: {exc}") from None
    return _decode(path, text)


def _decode(path: str, text: str) -> JobRecord:
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"job record {path} is unreadable: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"job record {path} is invalid (not an object)")
    version = data.get("version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ConfigError(f"job record {path} is invalid (version {version!r})")
    if version > RECORD_VERSION:
        raise ConfigError(
            f"job record {path} was written by a newer acbslurm (record version {version}; "
            f"this one reads up to {RECORD_VERSION}): run the same release on the node's "
            "hooks and in its jobs"
        )
    try:
        node = str(data.get("node", ""))
        return JobRecord(
            job_id=str(data["job_id"]),
            user=str(data["user"]),
            uid=int(data["uid"]),
            node=node,
            gpus=_gpus(data, node, version),
            cpus=int(data.get("cpus", 0)),
            mem_mb=int(data.get("mem_mb", 0)),
            created=float(data.get("created", 0.0)),
            alloc_error=str(data.get("alloc_error", "")),
            docker_socket=data.get("docker_socket", True) is not False,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"job record {path} is invalid ({exc})") from None


def _gpus(data: dict[str, Any], node: str, version: int) -> tuple[Gpu, ...]:
    if version == 1:
        return from_lists(
            node,
            [int(i) for i in data.get("gpu_indices", [])],
            [str(u) for u in data.get("gpu_uuids", [])],
            [int(m) for m in data.get("gpu_minors", [])],
        )
    gpus = data.get("gpus", [])
    if not isinstance(gpus, list):
        raise TypeError("gpus is not a list")
    return tuple(Gpu.from_json(g) for g in gpus)


def _untrusted(st: os.stat_result) -> bool:
    """True unless root owns it and nobody else may write it."""
    return st.st_uid != 0 or bool(st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def read_trusted_record(record_dir: str, job_id: str) -> JobRecord | None:
    """Like ``read_record``, for deciding which GPUs a job gets (``acbslurm run``).

    ``record_dir`` comes from settings a user can change (ACBSLURM_CONFIG,
    ACBSLURM_RECORD_DIR), so the record is trusted only when its directory and the file
    itself are root-owned and writable by root alone (only the prolog writes there), and
    when it is the record of ``job_id``. Anything else is a ConfigError, never GPUs.
    """
    path = record_path(record_dir, job_id)
    parent = os.path.dirname(path)
    try:
        dir_stat = os.stat(parent)
    except FileNotFoundError:
        return None  # no prolog has written a record on this node
    except OSError as exc:
        raise ConfigError(f"job record directory {parent}: {exc.strerror}") from None
    if _untrusted(dir_stat):
        raise ConfigError(
            f"job record directory {parent} is not root-owned and writable by root "
            "alone, so its records are not trusted (record_dir setting)"
        )
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"job record {path} is unreadable: {exc.strerror}") from None
    # Checked and read through one descriptor: the file cannot be swapped in between.
    with os.fdopen(fd, "rb") as f:
        if _untrusted(os.fstat(f.fileno())):
            raise ConfigError(f"job record {path} is not root-owned and writable by root alone")
        rec = _decode(path, f.read().decode(errors="replace"))
    if rec.job_id != job_id:
        raise ConfigError(f"job record {path} is for job {rec.job_id!r}, not {job_id!r}")
    return rec


def remove_record(record_dir: str, job_id: str) -> bool:
    """Remove the job's record; False when there was none.

    A read-only directory answers EROFS before it looks for the file: no record there
    (a job whose prolog failed on that very directory) is nothing to remove, not an error.
    """
    path = record_path(record_dir, job_id)
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    except OSError:
        if not os.path.lexists(path):
            return False
        raise
    return True
