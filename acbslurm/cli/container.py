"""`acbslurm run`: the job's container, in the user's rootless Docker, with the job's GPUs."""

from __future__ import annotations

import os
import sys

import click

from acbslurm.config import load_settings
from acbslurm.container.options import (
    GpuNotAllocated,
    OptionError,
    parse_env,
    parse_gpus,
    parse_mount,
    resolve_gpus,
    resolve_limits,
)
from acbslurm.errors import SetupError
from acbslurm.hooks.record import JobRecord, check_job_id, read_trusted_record


def _bad(exc: OptionError) -> click.BadParameter:
    return click.BadParameter(str(exc), param_hint=f"'{exc.option}'")


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
            f"no acbslurm record for job {job_id} on this node: the acbslurm prolog is not "
            "configured (Prolog= and PrologFlags=Alloc in slurm.conf); use --gpus none to "
            "run without GPUs"
        )
    if rec.uid != os.getuid():
        raise GpuNotAllocated(f"job {job_id} belongs to {rec.user}, not to you")
    return rec


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option(
    "--gpus",
    "gpus",
    default="auto",
    show_default=True,
    help="auto (the job's GPUs from Slurm), none, or a comma list of the job's GPU UUIDs.",
)
@click.option(
    "--mount", "mounts", multiple=True, metavar="SRC:DST[:ro]", help="Bind-mount a host path."
)
@click.option("--env", "envs", multiple=True, metavar="KEY=VALUE", help="Set a variable.")
@click.option("--workdir", default=None, help="Working directory inside the container.")
@click.option("--name", default=None, help="Container name (default acbslurm-<job>-<random>).")
@click.option(
    "--grace",
    type=click.FloatRange(min=0),
    default=None,
    help="Seconds between SIGTERM and SIGKILL when the job is cancelled (default: setting).",
)
@click.option("--cpus", type=float, default=None, help="CPU limit, at most the job's CPUs.")
@click.option("--memory", default=None, help="Memory limit (512m, 2g), at most the job's memory.")
@click.argument("image")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def run(
    gpus: str,
    mounts: tuple[str, ...],
    envs: tuple[str, ...],
    workdir: str | None,
    name: str | None,
    grace: float | None,
    cpus: float | None,
    memory: str | None,
    image: str,
    command: tuple[str, ...],
) -> None:
    """Run IMAGE [--] [COMMAND...] in your rootless Docker with exactly the job's GPUs.

    Output is streamed, SIGTERM/SIGINT (scancel, time limit) stop the container after
    a grace period, and the container's exit code becomes this command's exit code.
    """
    from acbslurm.container.engine_api import EngineApi
    from acbslurm.container.hosts import find_docker_host
    from acbslurm.container.job_membership import in_job
    from acbslurm.container.launch import LaunchSpec, command_of, run_container

    ctx = click.get_current_context()
    try:
        gpus_spec = parse_gpus(gpus)
        mount_list = [parse_mount(m) for m in mounts]
        env = dict(parse_env(e) for e in envs)
    except OptionError as exc:
        raise _bad(exc) from None
    if workdir is not None and not workdir.startswith("/"):
        raise click.BadParameter(
            f"must be an absolute path, got {workdir!r}", param_hint="'--workdir'"
        )

    settings = load_settings()
    job_id = os.environ.get("SLURM_JOB_ID")
    record = _job_record(settings.record_dir, job_id, gpus_spec)
    try:
        uuids = resolve_gpus(gpus_spec, record)
        limits = resolve_limits(cpus, memory, record)
    except GpuNotAllocated as exc:
        raise click.BadParameter(str(exc), param_hint="'--gpus'") from None
    except OptionError as exc:
        raise _bad(exc) from None
    if uuids and job_id is not None and not in_job(job_id):
        raise click.BadParameter(
            f"this process is not part of Slurm job {job_id} (SLURM_JOB_ID is set, but no "
            "slurmstepd of that job is among its parents), so it gets none of its GPUs",
            param_hint="'--gpus'",
        )

    user = record.user if record else os.environ.get("USER", str(os.getuid()))
    host = find_docker_host(os.environ, settings, os.getuid(), user)
    spec = LaunchSpec(
        image=image,
        command=command_of(command),
        gpu_uuids=uuids,
        limits=limits,
        job_id=job_id or "",
        user=user,
        name=name or f"acbslurm-{job_id or 'local'}-{os.urandom(3).hex()}",
        grace=settings.stop_grace if grace is None else grace,
        mounts=mount_list,
        env=env,
        workdir=workdir,
    )
    sys.stdout.flush()
    ctx.exit(run_container(EngineApi(host, timeout=30.0), spec))
