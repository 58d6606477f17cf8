"""What `acbslurm run` does once its arguments are parsed (click-free).

Both the click command (``cli/container.py``) and the fast parser the console entry
uses for a job's start (``cli/run_fast.py``) call ``execute``: one behaviour, two
front ends. Every bad value raises ``OptionError`` naming the option before anything
is started, so a front end may hand such an error to the other one to report.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from acbslurm.config import DEFAULT_CONFIG_FILE, load_settings
from acbslurm.container.options import (
    GpuNotAllocated,
    OptionError,
    parse_env,
    parse_gpus,
    parse_mount,
    resolve_gpus,
    resolve_grace,
    resolve_limits,
)
from acbslurm.errors import SetupError
from acbslurm.jobrecord import JobRecord, check_job_id, read_trusted_record


@dataclass(frozen=True)
class RunArgs:
    image: str
    command: tuple[str, ...] = ()
    gpus: str = "auto"
    mounts: tuple[str, ...] = ()
    envs: tuple[str, ...] = ()
    workdir: str | None = None
    name: str | None = None
    grace: float | None = None
    cpus: float | None = None
    memory: str | None = None
    pull: str = "missing"


def _settings_source() -> str:
    """Where this process's settings came from, for a message."""
    named = os.environ.get("ACBSLURM_CONFIG")
    if named:
        return f"ACBSLURM_CONFIG={named}"
    if os.path.isfile(DEFAULT_CONFIG_FILE):
        return DEFAULT_CONFIG_FILE
    return f"the defaults (no {DEFAULT_CONFIG_FILE}, no ACBSLURM_CONFIG)"


def _indices_of(uuids: list[str], record: JobRecord | None) -> list[int]:
    """The node's index of each GPU, from the prolog's record (for CDI specs that name
    GPUs by index only); empty when a record does not pair them."""
    if record is None or len(record.gpu_indices) != len(record.gpu_uuids):
        return []
    index = dict(zip(record.gpu_uuids, record.gpu_indices, strict=True))
    return [index[u] for u in uuids] if all(u in index for u in uuids) else []


def _job_record(
    record_dir: str, job_id: str | None, gpus_spec: str | list[str]
) -> JobRecord | None:
    """The prolog's record of this job, checked to belong to the caller."""
    if job_id is None:
        return None
    rec = read_trusted_record(record_dir, check_job_id(job_id))
    if rec is None:
        if gpus_spec == "none":
            return None
        raise SetupError(
            f"no acbslurm record for job {job_id} in {record_dir} on this node: the acbslurm "
            "prolog is not configured (Prolog= and PrologFlags=Alloc in slurm.conf), or it "
            f"writes its records elsewhere ({_settings_source()} gave this record_dir; the "
            "prolog's wrapper and the job's environment must name the same settings file); "
            "use --gpus none to run without GPUs"
        )
    if rec.uid != os.getuid():
        raise GpuNotAllocated(f"job {job_id} belongs to {rec.user}, not to you")
    return rec


def execute(args: RunArgs) -> int:
    """Check ``args`` against the job's record, run the container; its exit code."""
    from acbslurm.container.job_membership import in_job
    from acbslurm.container.launch import LaunchSpec, command_of, run_container
    from acbslurm.container.pull import ensure_image
    from acbslurm.dockerapi.engine import EngineApi
    from acbslurm.dockerapi.hosts import find_docker_host

    if args.pull not in ("missing", "always", "never"):
        raise OptionError("--pull", f"must be missing, always or never, got {args.pull!r}")
    gpus_spec = parse_gpus(args.gpus)
    mount_list = [parse_mount(m) for m in args.mounts]
    env = dict(parse_env(e) for e in args.envs)
    if args.workdir is not None and not args.workdir.startswith("/"):
        raise OptionError("--workdir", f"must be an absolute path, got {args.workdir!r}")

    settings = load_settings()
    grace = resolve_grace(args.grace, settings.stop_grace)
    job_id = os.environ.get("SLURM_JOB_ID")
    record = _job_record(settings.record_dir, job_id, gpus_spec)
    try:
        uuids = resolve_gpus(gpus_spec, record)
    except GpuNotAllocated as exc:
        raise OptionError("--gpus", str(exc)) from None
    limits = resolve_limits(args.cpus, args.memory, record)
    if uuids and job_id is not None and not in_job(job_id):
        raise OptionError(
            "--gpus",
            f"this process is not part of Slurm job {job_id} (SLURM_JOB_ID is set, but no "
            "slurmstepd of that job is among its parents), so it gets none of its GPUs",
        )

    user = record.user if record else os.environ.get("USER", str(os.getuid()))
    host = find_docker_host(os.environ, settings, os.getuid(), user)
    spec = LaunchSpec(
        image=args.image,
        command=command_of(args.command),
        gpu_uuids=uuids,
        limits=limits,
        job_id=job_id or "",
        user=user,
        name=args.name or f"acbslurm-{job_id or 'local'}-{os.urandom(3).hex()}",
        grace=grace,
        mounts=mount_list,
        env=env,
        workdir=args.workdir,
        gpu_indices=_indices_of(uuids, record),
    )
    sys.stdout.flush()
    api = EngineApi(host, timeout=30.0)
    ensure_image(api, args.image, args.pull)
    return run_container(api, spec)
