"""``acbslurm render / submit``: parse, call the library, print."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from acbslurm.cli.jobstatus import backend as _backend
from acbslurm.cli.jobstatus import record_dir as _record_dir
from acbslurm.cli.jobstatus import user_name as _user
from acbslurm.clitypes import AsciiInt, FiniteFloat
from acbslurm.config import load_settings
from acbslurm.render import render as render_script
from acbslurm.serve.pooljob import pool_job
from acbslurm.spec import load_spec

if TYPE_CHECKING:
    from acbslurm.slurm.jobtypes import SubmitResult
    from acbslurm.spec import JobSpec

# What submit alone needs (Slurm's client, the submit checks, the waiting) is imported
# in its functions: `acbslurm render` needs none of it.

_SET_HELP = "Override a spec key, e.g. --set mem=4G or --set container.image=x:1 (repeatable)."
_TEMPLATE_HELP = "A site's own sbatch template (Jinja) instead of the packaged one."
_ACBSLURM_HELP = (
    "The acbslurm command the job runs for `acbslurm run` (default: the node_acbslurm "
    "setting, else the executable running now)."
)


def default_acbslurm_command() -> list[str]:
    """How the job calls acbslurm: this executable's absolute path, or python -m."""
    argv0 = sys.argv[0] if sys.argv else ""
    if argv0.endswith("__main__.py") or not argv0:
        return [sys.executable, "-m", "acbslurm"]
    path = argv0 if os.sep in argv0 else (shutil.which(argv0) or argv0)
    return [str(Path(path).resolve())]


def _load(spec_path: str, overrides: tuple[str, ...], check_paths: bool = True) -> JobSpec:
    """The spec; for a pool job (``serve:``) with its pool file checked and its GPUs set."""
    spec = load_spec(spec_path, overrides)
    if spec.serve is None:
        return spec

    return pool_job(spec, check_paths=check_paths)


def _render(spec: JobSpec, template: str | None, acbslurm: str | None) -> str:
    """The job script; acbslurm is called as --acbslurm, else the site's
    ``node_acbslurm`` (the path on the nodes), else as this one."""
    if acbslurm:
        words = [acbslurm]
    else:
        configured = load_settings().node_acbslurm
        words = shlex.split(configured) if configured else default_acbslurm_command()
    return render_script(spec, acbslurm=words, template=template)


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
    type=AsciiInt(min=1),
    default=1,
    show_default=True,
    help="How many identical jobs to submit.",
)
@set_option
@template_option
@acbslurm_option
@click.option("--dry-run", is_flag=True, help="Validate and render only; print the script.")
@click.option(
    "--no-check",
    is_flag=True,
    help="Skip the checks before submitting (directories, partition, account, image).",
)
@click.option("--wait", is_flag=True, help="Follow the jobs until they end; fail if any failed.")
@click.option(
    "--interval",
    type=FiniteFloat(min=0.1),
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
    no_check: bool,
    wait: bool,
    interval: float,
    as_json: bool,
) -> None:
    """Validate SPEC, render it and submit it COUNT times; print the job ids."""
    job = _load(spec, overrides, check_paths=not no_check)
    script = _render(job, _template_default(template), acbslurm_cmd)
    if dry_run:
        if as_json:
            click.echo(json.dumps({"job_ids": [], "dry_run": True, "script": script}))
        else:
            click.echo(script, nl=False)
        return
    if not no_check:
        _check(job)
    from acbslurm.slurm.jobs import submit_script

    backend = _backend()  # asks `scontrol --version` for auto: once for submit and --wait
    result = submit_script(script, count=count, backend=backend)
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
    ctx.exit(_wait_for(result.job_ids, interval, as_json, job, backend))


def _check(job: JobSpec) -> None:
    """Refuse a job that would fail at once; warn about what may still go wrong."""
    from acbslurm.submitcheck import SubmitCheckError, check_submission

    found = check_submission(job, cwd=os.getcwd(), user=_user())
    for warning in found.warnings:
        click.echo(f"Warning: {warning}", err=True)
    if found.errors:
        raise SubmitCheckError(
            "the job would fail, nothing was submitted (--no-check submits anyway):\n  "
            + "\n  ".join(found.errors)
        )


def _wait_for(
    job_ids: list[str], interval: float, as_json: bool, spec: JobSpec, backend: str
) -> int:
    """Follow the jobs to their end; 1 if one did not complete, with the reasons (and
    at once when the only ones left will never start: ``waiting.NEVER_CLEARS``)."""
    from acbslurm.cli.waiting import explain, explain_stuck, follow, is_terminal, stuck

    final = follow(
        job_ids,
        interval,
        record_dir=_record_dir(),
        live=is_terminal(),
        quiet=as_json,
        backend=backend,
    )
    failed = [j for j in final if j.failed]
    never = stuck(final)
    if as_json:
        click.echo(json.dumps({"job_ids": job_ids, "jobs": [j.as_json() for j in final]}))
    explain(failed, spec)
    explain_stuck(never, spec)
    if failed or never:
        click.echo(f"{len(failed) + len(never)} of {len(final)} jobs did not complete.", err=True)
        return 1
    return 0


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
