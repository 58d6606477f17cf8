"""Slurm hook commands (prolog, epilog, task-prolog) and `acbslurm gpus`."""

from __future__ import annotations

import json
import os
import sys

import click

from acbslurm.errors import ConfigError

# Each command imports what it alone needs in its own function: `acbslurm gpus` or
# `acbslurm install-runtime` need none of the hooks' modules, nor a hook the others'.


@click.command()
@click.pass_context
def prolog(ctx: click.Context) -> None:
    """Slurm Prolog: map the job's GPUs to UUIDs and write the job record (runs as root)."""
    from acbslurm.hooks.prolog import run_prolog

    ctx.exit(run_prolog(os.environ))


@click.command()
@click.pass_context
def epilog(ctx: click.Context) -> None:
    """Slurm Epilog: remove every container of the job and its record (runs as root)."""
    from acbslurm.hooks.epilog import run_epilog

    ctx.exit(run_epilog(os.environ))


@click.command("task-prolog")
@click.pass_context
def task_prolog(ctx: click.Context) -> None:
    """Slurm TaskProlog: export ACBSLURM_GPU_UUIDS into the job's environment."""
    from acbslurm.hooks.task_prolog import run_task_prolog

    ctx.exit(run_task_prolog(os.environ))


@click.command("install-runtime")
@click.argument("path", type=click.Path(dir_okay=False, writable=True))
def install_runtime(path: str) -> None:
    """Write acbslurm's OCI runtime for users' Docker daemons to PATH.

    Sites that set `container_cgroups: join` give each user's daemon this runtime
    (`"runtimes": {"acbslurm": {"path": PATH}}` in daemon.json): it is runc, and it puts a
    job's container into the job step's cgroups before the container's command runs.
    """
    from acbslurm.cgroups.runtime import script

    tmp = f"{path}.tmp"
    try:
        with open(tmp, "w") as f:
            f.write(script(sys.executable))
        os.chmod(tmp, 0o755)  # noqa: S103 - Docker runs it as each user
        os.replace(tmp, path)
    except OSError as exc:
        raise click.ClickException(f"cannot write {path}: {exc.strerror}") from None
    click.echo(f"wrote {path} (runtime for Docker: acbslurm; Python: {sys.executable})")


@click.command()
@click.option("--job", "job_id", default=None, help="Job id (default: $SLURM_JOB_ID).")
@click.option(
    "--from-env",
    is_flag=True,
    help="Map SLURM_JOB_GPUS/CUDA_VISIBLE_DEVICES now instead of reading the job record.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def gpus(job_id: str | None, from_env: bool, as_json: bool) -> None:
    """Print a job's GPUs: Slurm index, device minor number and UUID."""
    from acbslurm.config import load_settings
    from acbslurm.jobrecord import check_job_id, gpu_rows, read_record

    settings = load_settings()
    jid = job_id or os.environ.get("SLURM_JOB_ID", "")
    if from_env:
        from acbslurm.gpu.node import job_gpus

        mapped = job_gpus(os.environ, settings)
        rows = gpu_rows(mapped.gpus)
    else:
        if not jid:
            raise click.UsageError("not inside a Slurm job: give --job ID or --from-env")
        try:
            rec = read_record(settings.record_dir, check_job_id(jid))
        except ConfigError as exc:
            raise click.BadParameter(str(exc), param_hint="'--job'") from None
        if rec is None:
            raise click.BadParameter(
                f"no record of job {jid!r} in {settings.record_dir} on this node",
                param_hint="'--job'",
            )
        rows = gpu_rows(rec.gpus)
    if as_json:
        click.echo(json.dumps({"job_id": jid, "gpus": rows}, indent=2))
        return
    if not rows:
        click.echo(f"job {jid}: no GPUs")
        return
    click.echo(f"{'INDEX':>5}  {'MINOR':>5}  UUID")
    for r in rows:
        index = "-" if r["index"] is None else r["index"]
        click.echo(f"{index!s:>5}  {r['minor']!s:>5}  {r['uuid']}")
