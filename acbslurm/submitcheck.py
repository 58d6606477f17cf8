"""What `acbslurm submit` checks before a job queues, and explains after one failed.

Before: the output and error directories (Slurm does not create them; a job that
cannot open its output fails as ``JobLaunchFailure`` with no file anywhere), the
partition and the account, the container's mount sources the user cannot read, and
whether the user's Docker daemon knows the image and this host has the container's
mount sources and env files (warnings only: the node's daemon and disks may differ,
and ``pull`` may fetch the image there).

After (``submit --wait``): the reason Slurm gives, the exit code, and the last lines of
the job's error file.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from typing import TYPE_CHECKING

from acbslurm.config import load_settings
from acbslurm.dockerapi.engine import EngineApi, EngineError
from acbslurm.dockerapi.hosts import find_docker_host
from acbslurm.errors import ConfigError, DockerError
from acbslurm.slurm.cluster import account_has_user, job_details, partition_exists
from acbslurm.slurm.jobtypes import exit_status
from acbslurm.values import field, mutable

if TYPE_CHECKING:
    from acbslurm.slurm.jobtypes import JobInfo
    from acbslurm.spec import JobSpec

TAIL_LINES = 10
_TAIL_BYTES = 64 * 1024
_PATTERN = re.compile(r"%(%|[0-9]*[A-Za-z])")


class SubmitCheckError(ConfigError):
    """A job would fail at once: nothing was submitted (exit code 2)."""


@mutable
class Findings:
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def expand_path(
    pattern: str, *, job_id: str = "", user: str = "", name: str = "", node: str = ""
) -> str | None:
    """sbatch's filename patterns (``%j %A %a %x %u %N %%``); None for one left unknown."""
    base, _, task = job_id.partition("_")
    values = {"j": job_id if not task else "", "A": base, "a": task, "x": name, "u": user}
    values["N"] = node
    unknown = False

    def sub(m: re.Match[str]) -> str:
        nonlocal unknown
        spec = m.group(1)
        if spec == "%":
            return "%"
        value = values.get(spec[-1], "")
        if not value or spec[:-1]:
            unknown = True
        return value

    out = _PATTERN.sub(sub, pattern)
    return None if unknown else out


def _job_dir(spec: JobSpec, cwd: str) -> str:
    return os.path.join(cwd, spec.workdir) if spec.workdir else cwd


# complexity: the checks end at the first answer (writable file, unknown until the job runs,
# missing, not writable), each its own message; split, each helper would return a problem or None
# and the caller would test each.
def _directory_problem(kind: str, path: str, spec: JobSpec, cwd: str, user: str) -> str | None:
    full = expand_path(os.path.join(_job_dir(spec, cwd), path), user=user, name=spec.name or "")
    if full is not None and os.path.exists(full) and os.access(full, os.W_OK):
        return None  # an existing file it may write (/dev/null, a log it appends to)
    folder = os.path.dirname(os.path.join(_job_dir(spec, cwd), path)) or "/"
    expanded = expand_path(folder, user=user, name=spec.name or "")
    if expanded is None:  # %j, %N...: known only once the job runs
        return None
    if not os.path.isdir(expanded):
        return (
            f"{kind} directory {expanded!r} does not exist: Slurm does not create it, and the "
            "job would fail as JobLaunchFailure with no output anywhere; create it first"
        )
    if not os.access(expanded, os.W_OK | os.X_OK):
        return (
            f"{kind} directory {expanded!r} is not writable by {user or 'you'}: the job would "
            "fail as JobLaunchFailure with no output anywhere; choose another path"
        )
    return None


def check_paths(spec: JobSpec, *, cwd: str, user: str) -> list[str]:
    """Problems with the job's working, output and error directories (as seen here)."""
    problems: list[str] = []
    if spec.workdir:
        wd = expand_path(_job_dir(spec, cwd), user=user, name=spec.name or "")
        if wd is not None and not os.path.isdir(wd):
            problems.append(f"working directory {wd!r} (workdir) does not exist")
            return problems
    paths = {"output": spec.output or "slurm-%j.out"}
    if spec.error:
        paths["error"] = spec.error
    for kind, path in paths.items():
        problem = _directory_problem(kind, path, spec, cwd, user)
        if problem and problem not in problems:
            problems.append(problem)
    return problems


def check_slurm(spec: JobSpec, *, user: str, env: Mapping[str, str] | None = None) -> Findings:
    """The partition and the account, as Slurm knows them."""
    found = Findings()
    if spec.partition:
        known = partition_exists(spec.partition, env=env)
        if known is False:
            found.errors.append(
                f"partition {spec.partition!r} does not exist (`sinfo -s` lists the partitions)"
            )
        elif known is None:
            found.warnings.append(
                f"could not ask Slurm whether partition {spec.partition!r} exists"
            )
    if spec.account:
        member = account_has_user(spec.account, user, env=env)
        if member is False:
            found.errors.append(
                f"account {spec.account!r} does not exist or {user} may not charge it "
                f"(`sacctmgr show associations where user={user}` lists yours)"
            )
    return found


def check_image(spec: JobSpec, *, user: str) -> str | None:
    """A warning when the user's daemon here lacks the image (None: it has it, or no daemon)."""
    if spec.container is None:
        return None
    image, pull = spec.container.image, spec.container.pull
    try:
        host = find_docker_host(os.environ, load_settings(), os.getuid(), user)
        EngineApi(host, timeout=3.0).image_inspect(image)
    except EngineError as exc:
        if exc.status != 404:
            return None
    except DockerError:
        return None  # no daemon on the submit host: the node's is what counts
    else:
        return None
    if pull == "never":
        return (
            f"image {image!r} is not in your Docker daemon here, and the spec says pull: never: "
            "the job fails unless the node's daemon has it (`docker build`/`docker load` it there)"
        )
    return (
        f"image {image!r} is not in your Docker daemon here; `acbslurm run` will try to pull it "
        "on the node (build or load it there if no registry has it)"
    )


def check_sources(spec: JobSpec) -> list[str]:
    """Warnings for the container's mount sources and env files this host does not have.

    Warnings, not errors: they are the node's paths, which a node-local disk may hold
    where the submit host has nothing (`acbslurm run` refuses a missing one on the node,
    and the job fails at once there).
    """
    if spec.container is None:
        return []
    paths = [(m.source, "mount source") for m in spec.container.mounts]
    paths += [(p, "env_file") for p in spec.container.env_files]
    return [
        f"{what} {path!r} does not exist here; the job fails at its start unless it exists "
        "on the node"
        for path, what in paths
        if _missing(path)
    ]


def _missing(path: str) -> bool:
    """Not there (a path this user may not look into is check_readable's)."""
    try:
        os.stat(path)
    except PermissionError:
        return False
    except OSError:
        return True
    return False


def check_readable(spec: JobSpec, *, user: str) -> list[str]:
    """Errors for the container's mount sources this host has but the submitting user
    cannot read (a folder: list and enter), each with where the spec set it.

    Submit runs as the user, so ``os.access`` asks as them (their groups included);
    the user's rootless Docker daemon mounts as them on the node, where the same path
    (most often the same shared file system) would refuse the container after the
    job waited in the queue."""
    if spec.container is None:
        return []
    wheres = spec.container.mount_wheres
    out: list[str] = []
    for i, m in enumerate(spec.container.mounts):
        where = wheres[i] if i < len(wheres) else spec.source
        if problem := _unreadable(m.source, user or "you"):
            out.append(
                f"{where}: mount source {m.source!r} {problem}: the job's container "
                "would fail at its start on the node; fix its permissions or mount "
                "another path"
            )
    return out


def _unreadable(path: str, who: str) -> str | None:
    """Why ``who`` (this process) cannot read ``path``; None: it can, or it is not here."""
    try:
        st = os.stat(path)
    except PermissionError:
        return f"is out of {who}'s reach (a folder on its way is closed)"
    except OSError:
        return None  # missing here: check_sources warns
    folder = stat.S_ISDIR(st.st_mode)
    if os.access(path, os.R_OK | (os.X_OK if folder else 0)):
        return None
    kind = "folder" if folder else "file"
    return (
        f"is a {kind} {who} cannot read (mode {stat.S_IMODE(st.st_mode):o}, owner uid {st.st_uid})"
    )


def check_submission(
    spec: JobSpec, *, cwd: str, user: str, env: Mapping[str, str] | None = None
) -> Findings:
    """Everything above; ``errors`` mean the job would fail at once."""
    found = check_slurm(spec, user=user, env=env)
    found.errors[:0] = check_paths(spec, cwd=cwd, user=user)
    found.errors.extend(check_readable(spec, user=user))
    if warning := check_image(spec, user=user):
        found.warnings.append(warning)
    found.warnings.extend(check_sources(spec))
    return found


def tail(path: str, lines: int = TAIL_LINES) -> list[str] | None:
    """The last ``lines`` lines of ``path``; None when it cannot be read here."""
    try:
        # O_NONBLOCK: the job's error file may be a FIFO (`#SBATCH -e fifo`), whose
        # open would wait for a writer; only a regular file's tail is shown.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - _TAIL_BYTES))
            data = f.read()
    except OSError:
        return None
    text = data.decode("utf-8", "replace").rstrip("\n")
    return text.splitlines()[-lines:] if text else []


def error_file(job: JobInfo, spec: JobSpec | None, details: Mapping[str, str], cwd: str) -> str:
    """Where the job's stderr went: scontrol's ``StdErr``, else the spec's path expanded."""
    if details.get("StdErr"):
        return details["StdErr"]
    pattern = (spec.error or spec.output) if spec else None
    pattern = pattern or "slurm-%j.out"
    if job.array_job_id and pattern == "slurm-%j.out":
        pattern = "slurm-%A_%a.out"
    base = details.get("WorkDir") or (_job_dir(spec, cwd) if spec else cwd)
    expanded = (
        expand_path(pattern, job_id=job.job_id, user=job.user, name=job.name, node=job.node)
        or pattern
    )
    return os.path.join(base, expanded)


def explain_failure(
    job: JobInfo, spec: JobSpec | None, *, cwd: str, env: Mapping[str, str] | None = None
) -> list[str]:
    """Lines that say why ``job`` failed: reason, exit code, the error file's last lines."""
    details = job_details(job.job_id, env=env)
    reason = job.reason or details.get("Reason", "")
    code, sig = exit_status(job.exit_code or details.get("ExitCode", ""))
    head = f"job {job.job_id} {job.state}"
    if reason:
        head += f", reason {reason}"
    if code is not None and (code or sig):
        head += f", exit code {code}" + (f" (signal {sig})" if sig else "")
    out = [head]
    if reason == "JobLaunchFailure":
        out.append(
            "  Slurm could not start the job: usually its output/error directory is missing "
            "or not writable on the node, or the working directory does not exist there"
        )
    out.extend(_error_file_lines(error_file(job, spec, details, cwd)))
    return out


def _error_file_lines(path: str) -> list[str]:
    """The last lines of the job's error file, or why there are none."""
    lines = tail(path)
    if lines is None:
        return [f"  error file {path}: not readable here"]
    if not lines:
        return [f"  error file {path}: empty"]
    return [f"  last lines of {path}:", *(f"    {line}" for line in lines)]
