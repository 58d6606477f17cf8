"""``acbslurm render / submit / status / cancel``: parse, call the library, print."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from acbslurm.slurm.jobs import JobInfo, SubmitResult
    from acbslurm.spec import JobSpec

_SET_HELP = "Override a spec key, e.g. --set mem=4G or --set container.image=x:1 (repeatable)."
_TEMPLATE_HELP = "A site's own sbatch template (Jinja) instead of the packaged one."
_ACBSLURM_HELP = (
    "The acbslurm command the job runs for `acbslurm run` (default: the executable running now)."
)


def default_acbslurm_command() -> list[str]:
    """How the job calls acbslurm: this executable's absolute path, or python -m."""
    argv0 = sys.argv[0] if sys.argv else ""
    if argv0.endswith("__main__.py") or not argv0:
        return [sys.executable, "-m", "acbslurm"]
    path = argv0 if os.sep in argv0 else (shutil.which(argv0) or argv0)
    return [str(Path(path).resolve())]


def _acbslurm_words(value: str | None) -> list[str]:
    return [value] if value else default_acbslurm_command()


def _load(spec_path: str, overrides: tuple[str, ...]) -> JobSpec:
    from acbslurm.spec import load_spec

    return load_spec(spec_path, overrides)


def _render(spec: JobSpec, template: str | None, acbslurm: str | None) -> str:
    from acbslurm.render import render as render_script

    return render_script(spec, acbslurm=_acbslurm_words(acbslurm), template=template)


def _template_default(template: str | None) -> str | None:
    return template or os.environ.get("ACBSLURM_SBATCH_TEMPLATE") or None


spec_argument = click.argument("spec", type=click.Path(dir_okay=False))
set_option = click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help=_SET_HELP)
template_option = click.option(
    "--template", type=click.Path(dir_okay=False), default=None, help=_TEMPLATE_HELP
)
acbslurm_option = click.option("--acbslurm", "acbslurm_cmd", default=None, help=_ACBSLURM_HELP)


@click.command()
@spec_argument
@set_option
@template_option
@acbslurm_option
def render(
    spec: str, overrides: tuple[str, ...], template: str | None, acbslurm_cmd: str | None
) -> None:
    """Print the sbatch script of job spec SPEC (nothing is submitted)."""
    job = _load(spec, overrides)
    click.echo(_render(job, _template_default(template), acbslurm_cmd), nl=False)


@click.command()
@spec_argument
@click.option(
    "-n",
    "--count",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="How many identical jobs to submit.",
)
@set_option
@template_option
@acbslurm_option
@click.option("--dry-run", is_flag=True, help="Validate and render only; print the script.")
@click.option("--wait", is_flag=True, help="Follow the jobs until they end; fail if any failed.")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1),
    default=1.0,
    show_default=True,
    help="Seconds between polls with --wait.",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def submit(
    ctx: click.Context,
    spec: str,
    count: int,
    overrides: tuple[str, ...],
    template: str | None,
    acbslurm_cmd: str | None,
    dry_run: bool,
    wait: bool,
    interval: float,
    as_json: bool,
) -> None:
    """Validate SPEC, render it and submit it COUNT times; print the job ids."""
    job = _load(spec, overrides)
    script = _render(job, _template_default(template), acbslurm_cmd)
    if dry_run:
        if as_json:
            click.echo(json.dumps({"job_ids": [], "dry_run": True, "script": script}))
        else:
            click.echo(script, nl=False)
        return
    from acbslurm.slurm.jobs import submit_script

    result = submit_script(script, count=count, backend=_backend())
    if not as_json:
        for jid in result.job_ids:
            click.echo(jid)
    if result.error is not None:
        _report_submit_failure(result, as_json)
        if result.partial:
            ctx.exit(PARTIAL_EXIT)
        raise result.error
    if not wait:
        if as_json:
            click.echo(json.dumps({"job_ids": result.job_ids}))
        return
    final = _follow(result.job_ids, interval, quiet=as_json)
    failed = [j for j in final if j.failed]
    if as_json:
        click.echo(json.dumps({"job_ids": result.job_ids, "jobs": [j.as_dict() for j in final]}))
    if failed:
        click.echo(f"{len(failed)} of {len(final)} jobs did not complete.", err=True)
        ctx.exit(1)


def _backend() -> str:
    """``cli`` or ``pyslurm``, from the ``slurm_backend`` setting (slurm/backend.py)."""
    from acbslurm.config import load_settings
    from acbslurm.slurm.backend import choose_backend

    settings = load_settings()
    return choose_backend(settings.slurm_backend, settings.slurm_conf)


# Some jobs were submitted and some not: neither success (0) nor nothing happened (1).
PARTIAL_EXIT = 4


def _report_submit_failure(result: SubmitResult, as_json: bool) -> None:
    """Every id that was submitted, the first error and the counts (text or JSON)."""
    if as_json:
        out = {
            "job_ids": result.job_ids,
            "error": str(result.error),
            "requested": result.requested,
            "submitted": len(result.job_ids),
            "failed": result.failed,
            "not_attempted": result.not_attempted,
        }
        click.echo(json.dumps(out))
    if result.partial:
        click.echo(
            f"Submitted {len(result.job_ids)} of {result.requested} jobs "
            f"({result.failed} sbatch calls failed, {result.not_attempted} not attempted); "
            f"the first error:\n{result.error}",
            err=True,
        )


def _follow(job_ids: list[str], interval: float, *, quiet: bool) -> list[JobInfo]:
    from acbslurm.slurm.watch import describe, watch_jobs

    last: dict[str, str] = {}
    snapshot: list[JobInfo] = []
    for snapshot in watch_jobs(job_ids, interval=interval, record_dir=_record_dir()):
        for job in snapshot:
            line = describe(job)
            if last.get(job.job_id) != line:
                last[job.job_id] = line
                if not quiet:
                    click.echo(line, err=True)
    return snapshot


def _record_dir() -> str:
    from acbslurm.config import load_settings

    return load_settings().record_dir


def _validate_ids(ids: tuple[str, ...]) -> list[str]:
    from acbslurm.jobrecord import JOB_ID

    for jid in ids:
        if not JOB_ID.match(jid):
            raise click.BadParameter(
                f"{jid!r} is not a job id (e.g. 123 or 123_4)", param_hint="JOBID"
            )
    return list(ids)


def _gpu_text(job: JobInfo) -> str:
    if not job.gpu_indices and not job.gpu_uuids:
        return "-"
    parts = []
    for i, idx in enumerate(job.gpu_indices or [None] * len(job.gpu_uuids)):
        uuid = job.gpu_uuids[i] if i < len(job.gpu_uuids) else ""
        parts.append(f"{'' if idx is None else idx}{'=' + uuid if uuid else ''}")
    return ",".join(parts)


@click.command()
@click.argument("job_ids", nargs=-1, metavar="[JOBID]...")
@click.option("--user", "-u", default=None, help="Only jobs of this user.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(job_ids: tuple[str, ...], user: str | None, as_json: bool) -> None:
    """Show state, pending reason, elapsed time, node and GPUs of jobs."""
    from acbslurm.slurm.jobs import query_jobs

    ids = _validate_ids(job_ids)
    jobs = query_jobs(ids, user=user, record_dir=_record_dir())
    if as_json:
        click.echo(json.dumps({"jobs": [j.as_dict() for j in jobs]}, indent=2))
        return
    rows: list[tuple[Any, ...]] = [("JOBID", "STATE", "REASON", "ELAPSED", "NODE", "GPUS", "NAME")]
    for j in jobs:
        reason = j.reason if j.state in ("PENDING", "UNKNOWN") else ""
        rows.append(
            (
                j.job_id,
                j.state,
                reason or "-",
                j.elapsed or "-",
                j.node or "-",
                _gpu_text(j),
                j.name,
            )
        )
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        click.echo(
            "  ".join(str(v).ljust(w) for v, w in zip(r, widths, strict=False)) + "  " + r[-1]
        )


@click.command()
@click.argument("job_ids", nargs=-1, required=True, metavar="JOBID...")
@click.pass_context
def cancel(ctx: click.Context, job_ids: tuple[str, ...]) -> None:
    """Cancel jobs (their containers are stopped by the job's own cleanup).

    An array's id cancels all its tasks. Exits 1 if a job id is unknown to Slurm
    (scancel itself says nothing then).
    """
    from acbslurm.slurm.jobs import cancel_jobs, query_jobs

    ids = list(dict.fromkeys(_validate_ids(job_ids)))
    rows: dict[str, list[JobInfo]] = {i: [] for i in ids}
    for job in query_jobs(ids):
        rows[job.array_job_id or job.job_id].append(job)
    unknown = [i for i in ids if all(j.state == "UNKNOWN" for j in rows[i])]
    ended = [i for i in ids if i not in unknown and all(j.finished for j in rows[i])]
    live = [i for i in ids if i not in unknown and i not in ended]
    cancel_jobs(live, backend=_backend())
    if live:
        click.echo(f"Cancelled {' '.join(live)}")
    for i in ended:
        states = sorted({j.state for j in rows[i]})
        click.echo(f"Job {i} had already ended ({', '.join(states)})")
    if unknown:
        click.echo(f"Error: no such job: {' '.join(unknown)}", err=True)
        ctx.exit(1)
