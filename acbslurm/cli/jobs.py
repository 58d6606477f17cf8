"""``acbslurm render / submit / status / cancel``: parse, call the library, print."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from acbslurm.clitypes import AsciiInt, FiniteFloat

if TYPE_CHECKING:
    from collections.abc import Callable

    from acbslurm.slurm.cluster import GpuSlot
    from acbslurm.slurm.jobtypes import JobInfo, SubmitResult
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


def _user() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


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
    """Follow the jobs to their end; 1 if one did not complete, with the reasons."""
    from acbslurm.cli.waiting import explain, follow, is_terminal

    final = follow(
        job_ids,
        interval,
        record_dir=_record_dir(),
        live=is_terminal(),
        quiet=as_json,
        backend=backend,
    )
    failed = [j for j in final if j.failed]
    if as_json:
        click.echo(json.dumps({"job_ids": job_ids, "jobs": [j.as_json() for j in final]}))
    if failed:
        explain(failed, spec)
        click.echo(f"{len(failed)} of {len(final)} jobs did not complete.", err=True)
        return 1
    return 0


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


def _gpu_text(job: JobInfo, long: bool) -> str:
    """``0,1`` (Slurm's indices); with ``long`` each with its UUID (``0=GPU-...``).
    A job on several nodes: per node, ``vm-1:0,1 vm-2:0,1``."""
    if job.gpu_devices:
        return _per_node_text(job, long)
    if not job.gpu_indices and not job.gpu_uuids:
        return "-"
    parts = []
    for i, idx in enumerate(job.gpu_indices or [None] * len(job.gpu_uuids)):
        uuid = job.gpu_uuids[i] if long and i < len(job.gpu_uuids) else ""
        parts.append(f"{'' if idx is None else idx}{'=' + uuid if uuid else ''}")
    return ",".join(parts)


def _per_node_text(job: JobInfo, long: bool) -> str:
    """``vm-1:0,1 vm-2:0,1``: a job's GPUs per node (each with its UUID if ``long``)."""
    per_node: dict[str, list[str]] = {}
    for d in job.gpu_devices:
        uuid = f"={d['uuid']}" if long and d["uuid"] else ""
        per_node.setdefault(d["node"], []).append(f"{d['index']}{uuid}")
    return " ".join(f"{node}:{','.join(gpus)}" for node, gpus in per_node.items())


def _exit_text(job: JobInfo) -> str:
    from acbslurm.slurm.jobtypes import exit_status

    code, sig = exit_status(job.exit_code)
    if sig:
        return f"sig{sig}"
    return "-" if code is None or not job.finished else str(code)


def _name_unknown(jobs: list[JobInfo]) -> bool:
    """``Error: no such job: ...`` (or why Slurm cannot tell) on stderr; True if any."""
    unknown = [j for j in jobs if j.state == "UNKNOWN"]
    for why in dict.fromkeys(j.reason for j in unknown):
        which = " ".join(j.job_id for j in unknown if j.reason == why)
        what = f"cannot tell about job {which}: {why}" if why else f"no such job: {which}"
        click.echo(f"Error: {what}", err=True)
    return bool(unknown)


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
    from acbslurm.slurm.jobs import query_jobs

    ids = _validate_ids(job_ids)
    backend = _backend()
    jobs = query_jobs(ids, user=user, record_dir=_record_dir(), backend=backend)
    pools = _pool_addresses(jobs, backend)
    if as_json:
        click.echo(json.dumps(_status_json(jobs, pools), indent=2))
    else:
        _print_status([j for j in jobs if j.state != "UNKNOWN" or j.reason], long)
        _print_pools(pools)
    if _name_unknown(jobs):
        ctx.exit(1)


def _print_pools(pools: dict[str, dict[str, Any]]) -> None:
    """Where each pool job listens, and its key file (a path, never a key)."""
    for jid, pool in pools.items():
        keys = f"; keys in {pool['api_keys']}" if pool.get("api_keys") else ""
        click.echo(f"job {jid} serves {pool['url']} (bound {pool['bound']}; {pool['file']}{keys})")


def _status_json(jobs: list[JobInfo], pools: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``status --json``: the jobs Slurm knows (with their pool's address), the ids it
    does not."""
    unknown = [j.job_id for j in jobs if j.state == "UNKNOWN" and not j.reason]
    return {
        "jobs": [
            {**j.as_json(), "serve": pools.get(j.job_id)} for j in jobs if j.job_id not in unknown
        ],
        "unknown": unknown,
    }


def _pool_addresses(jobs: list[JobInfo], backend: str) -> dict[str, dict[str, Any]]:
    """The gateway addresses of the caller's running pool jobs (docs/serve.md).

    A pool job writes ``acbslurm-serve-JOBID.json`` (mode 0600) in its working
    directory once its workers are up; only the job's user can read it, so only
    the caller's own running jobs are looked at (one more squeue call, for those).
    Each working directory is listed once and only the files there are opened: many
    jobs share one, and on NFS every open of a missing file is a round trip.
    """
    me = _user()
    mine = [j.job_id for j in jobs if j.state == "RUNNING" and j.user == me and not j.array_job_id]
    if not mine:
        return {}
    from acbslurm.serve.address import address_file, read
    from acbslurm.slurm.jobs import work_dirs

    out = {}
    listed: dict[str, frozenset[str] | None] = {}
    for jid, folder in work_dirs(mine, backend=backend).items():
        if folder not in listed:
            listed[folder] = _listing(folder)
        path = address_file(folder, jid)
        data = _read_listed(path, listed[folder], read)
        if data is not None and "url" in data:
            out[jid] = {**data, "file": path}
    return out


def _listing(folder: str) -> frozenset[str] | None:
    """The names in ``folder``; None when it cannot be listed (then each file is tried)."""
    try:
        return frozenset(os.listdir(folder))
    except OSError:
        return None


def _read_listed(
    path: str, names: frozenset[str] | None, read: Callable[[str], dict[str, Any] | None]
) -> dict[str, Any] | None:
    """``read(path)`` where the folder's listing has the file (or could not be made)."""
    if names is not None and os.path.basename(path) not in names:
        return None
    return read(path)


def _table(rows: list[tuple[Any, ...]]) -> None:
    """Columns padded to their widest value; the last one (a name) left as it is."""
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        click.echo(
            "  ".join(str(v).ljust(w) for v, w in zip(r, widths, strict=False)) + "  " + str(r[-1])
        )


def _print_status(jobs: list[JobInfo], long: bool) -> None:
    header = ("JOBID", "USER", "PARTITION", "STATE", "REASON", "EXIT", "ELAPSED", "NODE", "GPUS")
    rows: list[tuple[Any, ...]] = [(*header, "NAME")]
    for j in jobs:
        rows.append(
            (
                j.job_id,
                j.user or "-",
                j.partition or "-",
                j.state,
                j.reason or "-",
                _exit_text(j),
                j.elapsed or "-",
                j.node or "-",
                _gpu_text(j, long),
                j.name,
            )
        )
    _table(rows)


def _slot_row(slot: GpuSlot) -> tuple[Any, ...]:
    """A job's GPU shows the job (also on a draining node); an idle one is ``free``
    only where Slurm can start a job: a drained or down node's say so, with the reason."""
    job = slot.job
    if job is not None:
        return (slot.node, slot.index, job.job_id, job.user, job.elapsed or "-", job.name)
    if slot.unavailable:
        return (slot.node, slot.index, slot.unavailable, "-", "-", slot.reason)
    return (slot.node, slot.index, "free", "-", "-", "")


def _gpu_status(as_json: bool) -> None:
    from acbslurm.slurm.cluster import gpu_slots

    slots = gpu_slots(record_dir=_record_dir())
    if as_json:
        click.echo(json.dumps({"gpus": [s.as_json() for s in slots]}, indent=2))
        return
    rows: list[tuple[Any, ...]] = [("NODE", "GPU", "JOBID", "USER", "ELAPSED", "NAME")]
    rows += [_slot_row(s) for s in slots]
    _table(rows)


@click.command()
@click.argument("job_ids", nargs=-1, required=True, metavar="JOBID...")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def cancel(ctx: click.Context, job_ids: tuple[str, ...], as_json: bool) -> None:
    """Cancel jobs (their containers are stopped by the job's own cleanup).

    An array's id cancels all its tasks. Exits 1 if a job id is unknown to Slurm
    (scancel itself says nothing then), as `status` does.
    """
    from acbslurm.slurm.jobs import cancel_known

    done = cancel_known(_validate_ids(job_ids), backend=_backend())
    if as_json:
        out = {
            "cancelled": done.cancelled,
            "ended": [{"job_id": i, "states": s} for i, s in done.ended.items()],
            "unknown": done.unknown,
        }
        click.echo(json.dumps(out, indent=2))
    else:
        if done.cancelled:
            click.echo(f"Cancelled {' '.join(done.cancelled)}")
        for i, states in done.ended.items():
            click.echo(f"Job {i} had already ended ({', '.join(states)})")
    if _name_unknown(done.unknown_rows):
        ctx.exit(1)
