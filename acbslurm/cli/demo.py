"""``acbslurm demo``: the seed's experiment on the sandbox, and what happened."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from acbslurm.demo.experiment import Phase
    from acbslurm.slurm.jobs import JobInfo

EXAMPLE = Path(__file__).resolve().parents[2] / "conf" / "examples" / "sandbox-gpu.yaml"


def _hold_pattern(count: int, hold: float) -> list[float]:
    # In the 4-job phase the first job is short, so one GPU is freed while the other is
    # still busy: the hand-over to a waiting job is then visible on its own.
    return [hold, 2 * hold, hold, hold][:count] if count == 4 else [hold] * count


def _fmt_time(ts: str) -> str:
    return ts.split("T")[-1] if ts else "-"


def _print_phase(phase: Phase, gpus: int) -> None:
    click.echo(f"\n{phase.count} job(s) of 1 GPU on a node with {gpus} GPUs:")
    rows = [("JOB", "GPU", "UUID", "WAITED", "PENDING REASONS", "RAN")]
    for j in sorted(phase.jobs, key=lambda t: int(t.job_id)):
        uuid = ",".join(j.gpu_uuids) or "-"
        if j.uuid_source:
            uuid += f" ({j.uuid_source})"
        rows.append(
            (
                j.job_id,
                ",".join(str(i) for i in j.gpu_indices) or "-",
                uuid,
                f"{j.waited:.0f} s",
                ",".join(j.reasons) or "-",
                f"{_fmt_time(j.start)}-{_fmt_time(j.end)} {j.state}",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        click.echo("  " + "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
    waiting = [j for j in phase.jobs if "Resources" in j.reasons]
    for j in waiting:
        click.echo(f"  job {j.job_id} waited {j.waited:.0f} s for a free GPU")
    for problem in phase.problems:
        click.echo(f"  PROBLEM: {problem}")


def _show_usage(acbslurm_cmd: list[str], user: str, ids: list[str], since: int) -> None:
    """The demo's GPU-hours, as `acbslurm report` reads them from slurmdbd's MariaDB."""
    from acbslurm import proc

    # slurmctld hands finished jobs to slurmdbd asynchronously: wait until all are stored.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        out = proc.run(
            ["sacct", "-X", "-n", "-P", "-j", ",".join(ids), "-o", "JobID,State"], check=False
        ).stdout.split()
        if len(out) == len(ids) and not any(s.endswith(("RUNNING", "PENDING")) for s in out):
            break
        time.sleep(0.5)
    argv = [*acbslurm_cmd, "report", "--user", user, "--start", f"@{since}"]
    click.echo("\nGPU usage of these jobs, from slurmdbd's database (acbslurm report):")
    click.echo(proc.run([*argv, "--by", "job"], timeout=60).stdout.rstrip())


@click.command()
@click.option(
    "--dir",
    "sandbox_dir",
    default=None,
    type=click.Path(file_okay=False),
    help="Sandbox directory (default: $ACBSLURM_SANDBOX_DIR or /var/lib/acbslurm/sandbox).",
)
@click.option(
    "--spec",
    default=None,
    type=click.Path(dir_okay=False, exists=True),
    help="One-GPU job spec to run (default: conf/examples/sandbox-gpu.yaml).",
)
@click.option(
    "--hold",
    type=click.FloatRange(min=1),
    default=6.0,
    show_default=True,
    help="Seconds each job holds its GPU.",
)
@click.option(
    "--no-container",
    is_flag=True,
    help="Hold the GPU with a plain `sleep` instead of the container (without `acbslurm run`).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=10),
    default=180.0,
    show_default=True,
    help="Seconds each phase may take.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.pass_context
def demo(
    ctx: click.Context,
    sandbox_dir: str | None,
    spec: str | None,
    hold: float,
    no_container: bool,
    timeout: float,
    as_json: bool,
) -> None:
    """Submit 1, then 2, then 4 one-GPU jobs on the sandbox and show what Slurm did.

    Prints which job got which GPU, who waited and for how long; exits 1 when the
    cluster did not behave like the seed's (one GPU per job, queueing, hand-over).
    Leftover jobs on the sandbox are cancelled first.
    """
    from acbslurm.config import load_settings
    from acbslurm.demo.experiment import run_phase
    from acbslurm.errors import SetupError
    from acbslurm.render import render
    from acbslurm.sandbox import Sandbox
    from acbslurm.slurm.jobs import cancel_and_wait
    from acbslurm.slurm.watch import describe
    from acbslurm.spec import load_spec

    sb = Sandbox.load(sandbox_dir)
    params = sb.params
    if not sb.is_up():
        raise SetupError(f"the sandbox at {sb.layout.root} is not up; run `acbslurm sandbox up`")
    spec_path = Path(spec) if spec else EXAMPLE
    if not spec_path.is_file():
        raise SetupError(f"example spec {spec_path} not found; pass --spec")
    os.environ.update(sb.env())  # our own squeue/sacct calls go to the sandbox
    record_dir = load_settings(str(sb.layout.acbslurm_conf)).record_dir
    inventory = {g.minor: g.uuid for g in sb.gpus}
    user_env = {**sb.user_env(), "PYTHONPATH": params.pythonpath}
    acbslurm_cmd = [params.python, "-m", "acbslurm"]
    home = user_env["HOME"]

    def script(seconds: float) -> str:
        hold_text = f"{seconds:g}"
        if no_container:
            overrides = ["container=", f"command=[sleep, '{hold_text}']"]
        else:
            overrides = [f"container.env.HOLD_SECONDS={hold_text}"]
        job = load_spec(spec_path, [f"account={params.user}", *overrides])
        return render(job, acbslurm=acbslurm_cmd)

    def progress(info: JobInfo) -> None:
        if not as_json:
            click.echo(f"  {describe(info)}")

    if not as_json:
        click.echo(f"Sandbox {sb.layout.root}: {len(inventory)} GPUs, jobs run as {params.user}")
        click.echo(f"Job spec: {spec_path} ({'sleep' if no_container else 'container'})")
    cancel_and_wait(timeout=60)
    started = int(time.time())
    phases = []
    for count in (1, 2, 4):
        if not as_json:
            click.echo(f"\nSubmitting {count} job(s) of 1 GPU ...")
        phase = run_phase(
            [(script(h), h) for h in _hold_pattern(count, hold)],
            user=sb.uid,
            env=user_env,
            cwd=home,
            record_dir=record_dir,
            inventory=inventory,
            timeout=timeout,
            on_update=progress,
        )
        phases.append(phase)
        if not as_json:
            _print_phase(phase, len(inventory))
    ok = not any(p.problems for p in phases)
    if as_json:
        out = {
            "ok": ok,
            "gpus": len(inventory),
            "phases": [
                {"count": p.count, "jobs": [j.as_dict() for j in p.jobs], "problems": p.problems}
                for p in phases
            ],
        }
        click.echo(json.dumps(out, indent=2))
    elif ok:
        click.echo(
            "\nAs in the seed: one GPU per job, jobs queue when no GPU is free, and a "
            "freed GPU goes to the next waiting job."
        )
        ids = [j.job_id for p in phases for j in p.jobs]
        _show_usage(acbslurm_cmd, params.user, ids, started)
    else:
        click.echo("\nThe experiment did NOT behave as expected (see PROBLEM lines).", err=True)
    if not ok:
        ctx.exit(1)
