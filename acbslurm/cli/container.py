"""`acbslurm run`: the job's container, in the user's rootless Docker, with the job's GPUs.

The console entry parses a plain `acbslurm run ...` without click (``run_fast``); this
command is the reference: help, and every usage error, are reported from here.
"""

from __future__ import annotations

import click

from acbslurm.clitypes import FiniteFloat
from acbslurm.container.options import OptionError
from acbslurm.container.run_command import RunArgs, execute


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
    type=FiniteFloat(min=0),
    default=None,
    help="Seconds between SIGTERM and SIGKILL when the job is cancelled (default: setting).",
)
@click.option("--cpus", type=FiniteFloat(), default=None, help="CPU limit, at most the job's CPUs.")
@click.option("--memory", default=None, help="Memory limit (512m, 2g), at most the job's memory.")
@click.option(
    "--pull",
    type=click.Choice(["missing", "always", "never"]),
    default="missing",
    show_default=True,
    help="Pull IMAGE into your Docker daemon first: when it lacks it, always, or never.",
)
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
    pull: str,
    image: str,
    command: tuple[str, ...],
) -> None:
    """Run IMAGE [--] [COMMAND...] in your rootless Docker with exactly the job's GPUs.

    Output is streamed, SIGTERM/SIGINT (scancel, time limit) stop the container after
    a grace period, and the container's exit code becomes this command's exit code.
    """
    args = RunArgs(
        image=image,
        command=command,
        gpus=gpus,
        mounts=mounts,
        envs=envs,
        workdir=workdir,
        name=name,
        grace=grace,
        cpus=cpus,
        memory=memory,
        pull=pull,
    )
    try:
        code = execute(args)
    except OptionError as exc:
        raise click.BadParameter(str(exc), param_hint=f"'{exc.option}'") from None
    click.get_current_context().exit(code)
