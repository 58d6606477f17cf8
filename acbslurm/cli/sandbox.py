"""`acbslurm sandbox up|down|status|env`: a real Slurm cluster on this machine (one node,
or several with `up --nodes`)."""

from __future__ import annotations

import json
import shlex
import time

import click

from acbslurm.clitypes import AsciiInt
from acbslurm.sandbox import Sandbox
from acbslurm.sandbox.dockerversions import offered
from acbslurm.sandbox.layout import DEFAULT_DIR, MAX_NODES, parse_gpu_types
from acbslurm.sandbox.registry import account_file
from acbslurm.slurm.versions import parse_release

# The builds (Docker's, Slurm's) are imported in `up`, the one command that needs them.

dir_option = click.option(
    "--dir",
    "root",
    envvar="ACBSLURM_SANDBOX_DIR",
    default=DEFAULT_DIR,
    show_default=True,
    type=click.Path(file_okay=False),
    help="Sandbox directory (all config and state live there). Env: ACBSLURM_SANDBOX_DIR.",
)


def _slurm_release(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``debian`` or a release such as 25.11.7, checked before the sandbox starts."""
    if value is None or value == "debian":
        return value

    try:
        parse_release(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None
    return value


def _gpu_types(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``TYPE:N,...``, checked before the sandbox starts."""
    if not value:
        return value

    try:
        parse_gpu_types(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None
    return value


def _docker_version(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """One of the offered releases (exit 2 naming them otherwise)."""
    if value is None or value in offered():
        return value
    raise click.BadParameter(
        f"Docker {value} is not offered; offered: {', '.join(offered())}", ctx, param
    )


def _progress(msg: str) -> None:
    click.echo(f"  {msg}", err=True)


@click.group()
def sandbox() -> None:
    """A complete local Slurm cluster (munge, MariaDB, slurmdbd, slurmctld, slurmd,
    rootless Docker with emulated GPUs) for trying acbslurm and for its tests."""


@sandbox.command()
@dir_option
@click.option(
    "--gpus",
    type=AsciiInt(1, 64),
    default=None,
    help="Number of emulated GPUs per node  [default: 2, or what the sandbox had].",
)
@click.option(
    "--gpu-types",
    metavar="TYPE:N,...",
    default=None,
    callback=_gpu_types,
    help="Typed emulated GPUs per node, in device-file order, e.g. h200:1,a100:1 "
    "(gres.conf Type=; jobs ask for --gres=gpu:h200:1); sets the GPU count  "
    "[default: untyped, or what the sandbox had].",
)
@click.option(
    "--nodes",
    type=AsciiInt(1, MAX_NODES),
    default=None,
    help="Number of nodes: one slurmd each (`slurmd -N`), all on this machine, each "
    "with its own GPUs  [default: 1, or what the sandbox had].",
)
@click.option(
    "--node-network/--no-node-network",
    default=None,
    help="With --nodes 2 or more: each node in a network namespace of its own, with its "
    "own address (10.X.Y.N on a bridge of the sandbox's own), its own /etc/hosts naming "
    "the nodes and its own Docker daemon, so that containers on two nodes talk over a "
    "network as on two machines  [default: off, or what the sandbox had].",
)
@click.option(
    "--port-base",
    type=AsciiInt(1024, 65000),
    default=None,
    envvar="ACBSLURM_SANDBOX_PORT_BASE",
    help="slurmctld port; slurmd, slurmdbd and MariaDB use the next three, further "
    "nodes' slurmd the ones after  [default: 16817]. Env: ACBSLURM_SANDBOX_PORT_BASE.",
)
@click.option(
    "--slurm",
    "slurm_release",
    metavar="VERSION",
    default=None,
    envvar="ACBSLURM_SANDBOX_SLURM",
    callback=_slurm_release,
    help="Slurm release to run: `debian` (the packaged 22.05, the default) or e.g. "
    "25.11.7, built once from its source tarball (ACBSLURM_SLURM_SOURCES, "
    "--slurm-source) into /var/cache/acbslurm/slurm. Env: ACBSLURM_SANDBOX_SLURM.",
)
@click.option(
    "--slurm-prefix",
    metavar="DIR",
    default=None,
    envvar="ACBSLURM_SANDBOX_SLURM_PREFIX",
    type=click.Path(file_okay=False, exists=True),
    help="Run an existing Slurm installation (its ./configure --prefix).",
)
@click.option(
    "--slurm-source",
    metavar="FILE",
    default=None,
    type=click.Path(dir_okay=False),
    help="The slurm-VERSION.tar.bz2 to build (checked against a SHA256SUMS beside it).",
)
@click.option(
    "--docker",
    "docker_version",
    metavar="VERSION",
    default=None,
    envvar="ACBSLURM_SANDBOX_DOCKER",
    callback=_docker_version,
    help="Docker release of the user's rootless daemon: 20.10 (the host's Debian 12 "
    "packages, the default), 26.1 (Debian trixie's) or 28.5 (sid's), fetched once into "
    "/var/cache/acbslurm/docker  [default: what the sandbox had]. "
    "Env: ACBSLURM_SANDBOX_DOCKER.",
)
def up(
    root: str,
    gpus: int | None,
    gpu_types: str | None,
    nodes: int | None,
    port_base: int | None,
    slurm_release: str | None,
    slurm_prefix: str | None,
    slurm_source: str | None,
    docker_version: str | None,
    node_network: bool | None,
) -> None:
    """Start the sandbox, or check it if it is already up (idempotent)."""
    from acbslurm.sandbox.dockerbuild import ensure_fetched
    from acbslurm.sandbox.slurmbuild import choose_install

    sb = Sandbox(root)
    click.echo(f"acbslurm sandbox: starting at {sb.layout.root}", err=True)
    install = choose_install(slurm_release, slurm_prefix, slurm_source, _progress)
    dock = ensure_fetched(docker_version, _progress) if docker_version else None
    click.echo(
        sb.up(
            gpus,
            port_base,
            _progress,
            install,
            nodes=nodes,
            gpu_types=gpu_types,
            docker_install=dock,
            node_network=node_network,
        )
    )


@sandbox.command()
@dir_option
def down(root: str) -> None:
    """Stop every process the sandbox started (its state stays for the next `up`)."""
    sb = Sandbox(root)
    t0 = time.monotonic()
    stopped = sb.down(progress=_progress)
    if stopped:
        click.echo(f"sandbox down ({len(stopped)} components) in {time.monotonic() - t0:.1f} s")
    else:
        click.echo("sandbox was not running")


@sandbox.command()
@dir_option
@click.argument("component")
def restart(root: str, component: str) -> None:
    """Restart one COMPONENT (munged, mariadb, slurmdbd, slurmctld, slurmd or
    slurmd-NODE, dockerd-USER) without touching the others; running jobs are not
    cancelled."""
    click.echo(Sandbox(root).restart(component, progress=_progress))


@sandbox.command()
@dir_option
def registry(root: str) -> None:
    """Start the sandbox's private registry (Debian's docker-registry with a login), if it
    is not running, holding the sandbox's busybox; print its address, its image and how
    to log in. It stops with `down`."""
    sb = Sandbox(root)
    who = sb.private_registry()
    click.echo(f"registry at {who.address}, image {who.image()}")
    click.echo(f"account {who.username}, its password in {account_file(sb.layout)} (root's)")
    click.echo(
        f"as {sb.user}: docker login {who.address} -u {who.username}, then "
        f"acbslurm run --pull always {who.image()} echo hello"
    )


@sandbox.command()
@dir_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def status(ctx: click.Context, root: str, as_json: bool) -> None:
    """Show each component; exit 0 only if all are up and ready."""
    sb = Sandbox(root)
    rows = sb.status()
    if as_json:
        click.echo(
            json.dumps({"dir": str(sb.layout.root), "components": [r.as_dict() for r in rows]})
        )
    else:
        click.echo(f"sandbox at {sb.layout.root}")
        for r in rows:
            state = "ready" if r.ready else ("running" if r.running else "stopped")
            pid = str(r.pid) if r.pid and r.running else "-"
            click.echo(f"  {r.name:16} {state:8} pid {pid:>7}  {r.detail}")
    if not all(r.ready for r in rows):
        ctx.exit(1)


@sandbox.command()
@dir_option
@click.option("--json", "as_json", is_flag=True, help="A JSON object instead of export lines.")
def env(root: str, as_json: bool) -> None:
    """Print the export lines that point sinfo, sbatch, sacct, docker and acbslurm at the
    sandbox:  eval "$(acbslurm sandbox env)"."""
    sb = Sandbox(root)
    values = sb.env()
    if as_json:
        click.echo(json.dumps(values, indent=2))
        return
    for key, value in values.items():
        click.echo(f"export {key}={shlex.quote(value)}")
    # The sandbox's own Slurm clients first (Debian's 22.05 ones cannot talk to others).
    # With `up --docker`, its CLI before them (Debian's Slurm is in /usr/bin, beside the
    # host's docker 20.10), so that `docker` matches the daemon.
    front = [*sb.params.docker.path_dirs[:1], values["ACBSLURM_SLURM_BIN_DIR"]]
    click.echo(f'export PATH={shlex.quote(":".join(front))}:"$PATH"')
