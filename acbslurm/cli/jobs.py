"""``acbslurm render / submit / status / cancel``: parse, call the library, print."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from acbslurm.cli import jobstatus
from acbslurm.cli.jobstatus import backend as _backend
from acbslurm.cli.jobstatus import record_dir as _record_dir
from acbslurm.cli.jobstatus import user_name as _user
from acbslurm.clitypes import AsciiInt, FiniteFloat

if TYPE_CHECKING:
    from acbslurm.slurm.jobtypes import SubmitResult
    from acbslurm.spec import JobSpec

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


def _acbslurm_words(value: str | None) -> list[str]:
    """--acbslurm, else the site's ``node_acbslurm`` (the path on the nodes), else this one."""
    if value:
        return [value]
    import shlex

    from acbslurm.config import load_settings

    configured = load_settings().node_acbslurm
    return shlex.split(configured) if configured else default_acbslurm_command()


def _load(spec_path: str, overrides: tuple[str, ...], check_paths: bool = True) -> JobSpec:
    """The spec; for a pool job (``serve:``) with its pool file checked and its GPUs set."""
    from acbslurm.spec import load_spec

    spec = load_spec(spec_path, overrides)
    if spec.serve is None:
        return spec
    from acbslurm.serve.pooljob import pool_job

    return pool_job(spec, check_paths=check_paths)


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


def _validate_ids(ids: tuple[str, ...]) -> list[str]:
    from acbslurm.jobrecord import JOB_ID

    for jid in ids:
        if not JOB_ID.match(jid):
            raise click.BadParameter(
                f"{jid!r} is not a job id (e.g. 123 or 123_4)", param_hint="JOBID"
            )
    return list(ids)


@click.command()
@click.argument("job_ids", nargs=-1, metavar="[JOBID]...")
@click.option("--user", "-u", default=None, help="Only jobs of this user.")
@click.option("-l", "--long", "long", is_flag=True, help="GPUs with their UUIDs.")
@click.option("--gpus", "gpu_view", is_flag=True, help="Per GPU: the job using it, or free.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def status(
    ctx: click.Context,
    job_ids: tuple[str, ...],
    user: str | None,
    long: bool,
    gpu_view: bool,
    as_json: bool,
) -> None:
    """Show state, reason, exit code, elapsed time, node and GPUs of jobs.

    Exits 1 when a job id given is unknown to Slurm (as `cancel` does); the others
    are shown all the same. `--gpus` shows every GPU of the cluster instead.
    """
    if gpu_view:
        if job_ids or user:
            raise click.UsageError("--gpus shows every GPU: give no JOBID or --user with it")
        _gpu_status(as_json)
        return
    ctx.exit(jobstatus.show(_validate_ids(job_ids), user, long, as_json))


def _gpu_status(as_json: bool) -> None:
    from acbslurm.slurm.cluster import gpu_slots

    slots = gpu_slots(record_dir=_record_dir())
    if as_json:
        click.echo(json.dumps({"gpus": [s.as_json() for s in slots]}, indent=2))
        return
    rows: list[tuple[Any, ...]] = [("NODE", "GPU", "JOBID", "USER", "ELAPSED", "NAME")]
    for slot in slots:
        # A job's GPU shows the job (also on a draining node); an idle one is free only
        # where Slurm can start a job: a drained or down node's say so, with the reason.
        job = slot.job
        if job is not None:
            rows.append((slot.node, slot.index, job.job_id, job.user, job.elapsed or "-", job.name))
        elif slot.unavailable:
            rows.append((slot.node, slot.index, slot.unavailable, "-", "-", slot.reason))
        else:
            rows.append((slot.node, slot.index, "free", "-", "-", ""))
    jobstatus.table(rows)


def _signal_name(ctx: click.Context, param: click.Parameter, value: str | None) -> str:
    """``--signal``: a signal's name (``USR1``, ``SIGUSR1``) or number, as scancel's."""
    import signal

    from acbslurm.units import is_ascii_int

    if value is None:
        return ""
    text = value.strip().upper()
    if is_ascii_int(text) and 0 < int(text) < signal.NSIG:
        return str(int(text))
    name = text if text.startswith("SIG") else f"SIG{text}"
    if name in signal.Signals.__members__:
        return name[3:]
    raise click.BadParameter(
        f"{value!r} is not a signal (a name such as USR1, TERM or INT, or a number)",
        ctx,
        param,
    )


@click.command()
@click.argument("job_ids", nargs=-1, required=True, metavar="JOBID...")
@click.option(
    "-s",
    "--signal",
    "signal_name",
    metavar="NAME",
    callback=_signal_name,
    help="Send this signal (USR1, TERM, 10...) instead of cancelling: to the job's steps, "
    "so a container started with `acbslurm run` gets it (scancel --signal).",
)
@click.option(
    "--full",
    is_flag=True,
    help="With --signal: the batch script too, not only its steps (scancel --full).",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def cancel(
    ctx: click.Context, job_ids: tuple[str, ...], signal_name: str, full: bool, as_json: bool
) -> None:
    """Cancel jobs (their containers are stopped by the job's own cleanup), or signal
    them (--signal: a checkpoint before a requeue, a reload).

    An array's id cancels all its tasks. Exits 1 if a job id is unknown to Slurm
    (scancel itself says nothing then), as `status` does.
    """
    from acbslurm.slurm.jobs import cancel_known

    if full and not signal_name:
        raise click.BadParameter("--full goes with --signal", ctx, param_hint="'--full'")
    done = cancel_known(_validate_ids(job_ids), backend=_backend(), signal=signal_name, full=full)
    if as_json:
        out: dict[str, Any] = {
            "signalled" if signal_name else "cancelled": done.cancelled,
            "ended": [{"job_id": i, "states": s} for i, s in done.ended.items()],
            "unknown": done.unknown,
        }
        if signal_name:
            out["signal"] = signal_name
        click.echo(json.dumps(out, indent=2))
    else:
        from acbslurm.units import is_ascii_int

        if done.cancelled and signal_name:
            what = f"signal {signal_name}" if is_ascii_int(signal_name) else f"SIG{signal_name}"
            click.echo(f"Sent {what} to {' '.join(done.cancelled)}")
        elif done.cancelled:
            click.echo(f"Cancelled {' '.join(done.cancelled)}")
        for i, states in done.ended.items():
            click.echo(f"Job {i} had already ended ({', '.join(states)})")
    if jobstatus.name_unknown(done.unknown_rows):
        ctx.exit(1)
