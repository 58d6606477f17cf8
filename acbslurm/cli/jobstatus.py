"""``acbslurm status`` and ``acbslurm cancel``: parse, query Slurm, print.

Apart from ``cli/jobs.py`` (render, submit) so that a look at the queue imports only
what it uses (docs/benchmarks.md, "`acbslurm status` on a long queue").
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from acbslurm.slurm.jobtypes import JobInfo

HEADER = ("JOBID", "USER", "PARTITION", "STATE", "REASON", "EXIT", "ELAPSED", "NODE", "GPUS")


def user_name() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def backend() -> str:
    """``cli`` or ``pyslurm``, from the ``slurm_backend`` setting (slurm/backend.py)."""
    from acbslurm.config import load_settings
    from acbslurm.slurm.backend import choose_backend

    settings = load_settings()
    return choose_backend(settings.slurm_backend, settings.slurm_conf)


def record_dir() -> str:
    from acbslurm.config import load_settings

    return load_settings().record_dir


# complexity: one flow: the query, then the table or the JSON
def show(ids: Sequence[str], user: str | None, long: bool, as_json: bool) -> int:
    """Print the jobs (``ids``, else all, or ``user``'s) as a table or JSON; 1 when an
    id is unknown to Slurm (named on stderr), else 0."""
    from acbslurm.slurm.jobs import query_jobs

    jobs = query_jobs(list(ids), user=user, record_dir=record_dir(), backend=backend())
    pools, ports = _job_files(jobs)
    if as_json:
        click.echo(json.dumps(status_json(jobs, pools, ports), indent=2))
    else:
        print_status([j for j in jobs if j.state != "UNKNOWN" or j.reason], long)
        for jid, pool in pools.items():  # the key file's path, never a key
            keys = f"; keys in {pool['api_keys']}" if pool.get("api_keys") else ""
            where = f"bound {pool['bound']}; {pool['file']}{keys}"
            click.echo(f"job {jid} serves {pool['url']} ({where})")
        if ports:
            from acbslurm.container.ports import named, said

            for jid, entries in ports.items():
                for e in entries:
                    where = e["address"] + named(e.get("node", ""), [e["address"]])
                    click.echo(said(e["port"], where, jid))
    return 1 if name_unknown(jobs) else 0


def gpu_text(job: JobInfo, long: bool) -> str:
    """``0,1`` (Slurm's indices); with ``long`` each with its UUID (``0=GPU-...``).
    A job on several nodes: per node, ``vm-1:0,1 vm-2:0,1``."""
    if not job.gpus:
        return "-"
    per_node: dict[str, list[str]] = {}
    for g in job.gpus:
        uuid = f"={g.uuid}" if long and g.uuid else ""
        per_node.setdefault(g.node, []).append(f"{'' if g.index is None else g.index}{uuid}")
    if len(per_node) == 1:
        return ",".join(next(iter(per_node.values())))
    return " ".join(f"{node}:{','.join(gpus)}" for node, gpus in per_node.items())


def name_unknown(jobs: list[JobInfo]) -> bool:
    """``Error: no such job: ...`` (or why Slurm cannot tell) on stderr; True if any."""
    unknown = [j for j in jobs if j.state == "UNKNOWN"]
    for why in dict.fromkeys(j.reason for j in unknown):
        which = " ".join(j.job_id for j in unknown if j.reason == why)
        what = f"cannot tell about job {which}: {why}" if why else f"no such job: {which}"
        click.echo(f"Error: {what}", err=True)
    return bool(unknown)


def status_json(
    jobs: list[JobInfo],
    pools: dict[str, dict[str, Any]],
    ports: dict[str, list[dict[str, str]]] | None = None,
) -> dict[str, Any]:
    """``status --json``: the jobs Slurm knows (with their pool's address and their
    containers' published ports), the ids it does not."""
    unknown = [j.job_id for j in jobs if j.state == "UNKNOWN" and not j.reason]
    published = ports or {}
    return {
        "jobs": [
            {**j.as_json(), "serve": pools.get(j.job_id), "published": published.get(j.job_id, [])}
            for j in jobs
            if j.job_id not in unknown
        ],
        "unknown": unknown,
    }


# complexity: each running job's two files read in turn, each bounded
def _job_files(
    jobs: list[JobInfo],
) -> tuple[dict[str, dict[str, Any]], dict[str, list[dict[str, str]]]]:
    """What the caller's running jobs keep in their working directories (jobfiles.py):
    each pool job's gateway address (docs/serve.md) and the ports each job's
    containers publish (`acbslurm run -p`).

    Only the job's user can read those files (mode 0600), so only the caller's own
    running jobs are looked at, in the working directories the query brought. Each
    working directory is listed once and only the files there are opened: many jobs
    share one, and on NFS every open of a missing file is a round trip.
    """
    me = user_name()
    mine = {  # not an array's tasks
        j.job_id: j.work_dir
        for j in jobs
        if j.state == "RUNNING"
        and j.user == me
        and not j.array_job_id
        and j.work_dir.startswith("/")
    }
    if not mine:
        return {}, {}
    from acbslurm.container.ports import by_job, of_job
    from acbslurm.serve.address import address_file, read

    pools: dict[str, dict[str, Any]] = {}
    ports: dict[str, list[dict[str, str]]] = {}
    # Each folder's listing and its port files by job; None: it could not be listed.
    listed: dict[str, tuple[frozenset[str], dict[str, list[str]]] | None] = {}
    for jid, folder in mine.items():
        if folder not in listed:
            try:
                names = frozenset(os.listdir(folder))
                listed[folder] = names, by_job(names)
            except OSError:  # then the pool's file is tried; port files need a listing
                listed[folder] = None
        here = listed[folder]
        path = address_file(folder, jid)
        if here is None or os.path.basename(path) in here[0]:
            data = read(path)
            if data is not None and "url" in data:
                pools[jid] = {**data, "file": path}
        if here and (found := of_job(jid, here[1].get(jid, []), folder)):
            ports[jid] = found
    return pools, ports


def table(rows: list[tuple[Any, ...]]) -> None:
    """Columns padded to their widest value; the last one (a name) left as it is.
    Written at once: a line at a time was a write and a flush per job."""
    cells = [list(map(str, r)) for r in rows]
    widths = [max(map(len, column)) for column in list(zip(*cells, strict=True))[:-1]]
    lines = ["  ".join(map(str.ljust, r[:-1], widths)) + "  " + r[-1] for r in cells]
    click.echo("\n".join(lines))


def print_status(jobs: list[JobInfo], long: bool) -> None:
    from acbslurm.slurm.jobtypes import exit_status

    rows: list[tuple[Any, ...]] = [(*HEADER, "NAME")]
    for j in jobs:
        code, sig = exit_status(j.exit_code)
        exit_text = "-" if code is None or not j.finished else str(code)
        rows.append(
            (
                j.job_id,
                j.user or "-",
                j.partition or "-",
                j.state,
                j.reason or "-",
                f"sig{sig}" if sig else exit_text,
                j.elapsed or "-",
                j.node or "-",
                gpu_text(j, long),
                j.name,
            )
        )
    table(rows)


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
    ctx.exit(show(_validate_ids(job_ids), user, long, as_json))


def _gpu_status(as_json: bool) -> None:
    from acbslurm.slurm.cluster import gpu_slots

    slots = gpu_slots(record_dir=record_dir())
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
    table(rows)


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
# complexity: one flow: the ids, the cancel, each id's outcome said
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
    done = cancel_known(_validate_ids(job_ids), backend=backend(), signal=signal_name, full=full)
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
    if name_unknown(done.unknown_rows):
        ctx.exit(1)
