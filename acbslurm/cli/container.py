"""`acbslurm run`: the job's container, in the user's rootless Docker, with the job's GPUs.

The console entry parses a plain `acbslurm run ...` without click (``run_fast``); this
command is the reference: help, and every usage error, are reported from here.
"""

from __future__ import annotations

import click

from acbslurm.clitypes import FiniteFloat
from acbslurm.container.options import REFUSED, OptionError, RunArgs
from acbslurm.container.run_command import execute


class _RunCommand(click.Command):
    """An unknown option before IMAGE is a usage error naming it (not an image name);
    one of `docker run`'s that is refused also says why."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as exc:
            why = REFUSED.get(exc.option_name)
            if why is None:
                raise
            raise click.UsageError(f"{exc.option_name} is refused: {why}", ctx) from None


# Options stop at IMAGE: what follows is the command's, dashes and all.
@click.command(cls=_RunCommand, context_settings={"allow_interspersed_args": False})
@click.option("-i", "--interactive", is_flag=True, help="Keep stdin attached to the container.")
@click.option("-t", "--tty", is_flag=True, help="Give the container a terminal (a tty).")
@click.option(
    "--user",
    default=None,
    metavar="NAME|UID[:GID]",
    help="User in the container (default: the image's USER).",
)
@click.option(
    "--shm-size",
    "shm_size",
    default=None,
    help="Size of /dev/shm (512m, 8g), at most the container's memory.",
)
@click.option("--entrypoint", default=None, help='Override the image\'s entrypoint ("" clears it).')
@click.option(
    "--env-file",
    "env_files",
    multiple=True,
    metavar="PATH",
    help="Variables from a file (Docker's syntax).",
)
@click.option(
    "--read-only",
    "read_only",
    is_flag=True,
    help="Mount the container's root file system read-only.",
)
@click.option(
    "--gpus",
    "gpus",
    default="auto",
    show_default=True,
    help="auto (the job's GPUs from Slurm; all means the same), none, or some of the "
    "job's GPUs: device=0,1 (by index in the job) or a comma list of their UUIDs.",
)
@click.option(
    "--mount", "mounts", multiple=True, metavar="SRC:DST[:ro]", help="Bind-mount a host path."
)
@click.option(
    "-e",
    "--env",
    "envs",
    multiple=True,
    metavar="KEY[=VALUE]",
    help="Set a variable (KEY alone: its value here, as `docker run -e`).",
)
@click.option("-w", "--workdir", default=None, help="Working directory inside the container.")
@click.option("--hostname", default=None, help="The container's host name.")
@click.option(
    "-p",
    "--publish",
    "publish",
    multiple=True,
    metavar="[IP:][HOST:]PORT",
    help="Publish the container's PORT on the node's HOST port (as `docker run -p`).",
)
@click.option(
    "--ulimit",
    "ulimits",
    multiple=True,
    metavar="NAME=SOFT[:HARD]",
    help="A resource limit (memlock=-1, nofile=4096:8192), at most the job's own "
    "hard limit on the node (-1 or unlimited: none).",
)
@click.option(
    "--device",
    "devices",
    multiple=True,
    metavar="/HOST[:/CONTAINER][:rwm]",
    help="A device file the site lists (setting container_devices, e.g. InfiniBand's); "
    "never a GPU's: those are the job's (--gpus).",
)
@click.option(
    "--network",
    "--net",
    "network",
    default=None,
    metavar="NETWORK",
    help="bridge (Docker's default), none, host (only where it is the node's network: "
    "the default for a step on several nodes there), or a network of your daemon.",
)
@click.option(
    "--requeue-exit",
    "requeue_exit",
    default=None,
    metavar="CODE",
    help="When the container exits with CODE (a checkpoint saved), requeue the job: "
    "Slurm runs it again, SLURM_RESTART_COUNT one higher.",
)
@click.option(
    "--rm",
    "remove",
    is_flag=True,
    help="Accepted as `docker run` has it: the container is always removed when it ends.",
)
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
    interactive: bool,
    tty: bool,
    user: str | None,
    shm_size: str | None,
    entrypoint: str | None,
    env_files: tuple[str, ...],
    read_only: bool,
    gpus: str,
    mounts: tuple[str, ...],
    envs: tuple[str, ...],
    workdir: str | None,
    hostname: str | None,
    publish: tuple[str, ...],
    ulimits: tuple[str, ...],
    devices: tuple[str, ...],
    network: str | None,
    requeue_exit: str | None,
    remove: bool,
    name: str | None,
    grace: float | None,
    cpus: float | None,
    memory: str | None,
    pull: str,
    image: str,
    command: tuple[str, ...],
) -> None:
    """Run IMAGE [--] [COMMAND...] in your rootless Docker with exactly the job's GPUs.

    Output is streamed in order; SIGTERM/SIGINT (scancel, time limit) stop the
    container after a grace period, suspend pauses it, every other signal is passed on
    to it; the container's exit code becomes this command's exit code.
    """
    args = RunArgs(
        image=image,
        command=command,
        gpus=gpus,
        mounts=mounts,
        envs=envs,
        workdir=workdir,
        hostname=hostname,
        publish=publish,
        ulimits=ulimits,
        devices=devices,
        network=network,
        requeue_exit=requeue_exit,
        remove=remove,
        name=name,
        grace=grace,
        cpus=cpus,
        memory=memory,
        pull=pull,
        interactive=interactive,
        tty=tty,
        user=user,
        shm_size=shm_size,
        entrypoint=entrypoint,
        env_files=env_files,
        read_only=read_only,
    )
    try:
        code = execute(args)
    except OptionError as exc:
        raise click.BadParameter(str(exc), param_hint=f"'{exc.option}'") from None
    click.get_current_context().exit(code)
