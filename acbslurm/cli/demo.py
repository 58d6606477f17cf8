"""``acbslurm demo``: the GPU-queue experiment on the sandbox, and what happened."""

from __future__ import annotations

import click

from acbslurm.clitypes import FiniteFloat
from acbslurm.demo.on_sandbox import DemoOptions, run_demo
from acbslurm.demo.show import NOT_OK


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
    type=FiniteFloat(min=1),
    default=6.0,
    show_default=True,
    # slurmctld starts batch jobs up to batch_sched_delay (3 s by default) after they are
    # submitted: jobs that hold their GPU for less may never overlap.
    help="Seconds each job holds its GPU (more than Slurm's batch scheduling delay, 3 s "
    "by default, or jobs submitted together need not run at once).",
)
@click.option(
    "--no-container",
    is_flag=True,
    help="Hold the GPU with a plain `sleep` instead of the container (without `acbslurm run`).",
)
@click.option(
    "--timeout",
    type=FiniteFloat(min=10),
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
    cluster did not behave as the experiment expects (one GPU per job, queueing, hand-over).
    Leftover jobs on the sandbox are cancelled first.
    """
    opts = DemoOptions(
        sandbox_dir=sandbox_dir,
        spec=spec,
        hold=hold,
        container=not no_container,
        timeout=timeout,
    )
    result = run_demo(opts, say=None if as_json else click.echo)
    if as_json:
        click.echo(result.as_json())
    elif not result.ok:
        click.echo(NOT_OK, err=True)
    if not result.ok:
        ctx.exit(1)
