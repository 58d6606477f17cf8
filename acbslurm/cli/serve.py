"""``acbslurm serve POOL.yaml``: an OpenAI-compatible model pool on broker leases."""

from __future__ import annotations

import importlib.util
import sys
from typing import TYPE_CHECKING

import click

from acbslurm.serve.keys import read_keys
from acbslurm.serve.limits import budget_path, describe
from acbslurm.serve.modelmaker import cache_dir, demo_pool_yaml
from acbslurm.serve.pool import check_listen, load_pool, load_pool_text

if TYPE_CHECKING:
    from acbslurm.serve.pool import PoolSpec


def _listen(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Checked before anything starts: a bad address names --listen and quotes itself."""
    if value is None:
        return None

    try:
        return check_listen(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def _pool(
    pool_file: str | None, demo: bool, listen: str | None, engine: str | None = None
) -> PoolSpec:
    """The pool of POOL_FILE, or of --demo (its models made on first use; ``engine``:
    every model's, default builtin)."""
    if demo == bool(pool_file):
        raise click.UsageError("give a POOL_FILE or --demo (not both)")
    if engine and not demo:
        raise click.UsageError("--engine goes with --demo (a pool file names each model's engine:)")
    if demo:
        click.echo(f"demo models in {cache_dir()} (made on first use)", err=True)
        text = demo_pool_yaml(listen=listen or "127.0.0.1:8000", engine=engine or "builtin")
        return load_pool_text(text, "<demo pool>")
    assert pool_file is not None
    return load_pool(pool_file)


def _show(pool: PoolSpec) -> None:
    """What --check prints of a valid pool: its models, key names and limits."""
    for m in pool.models:
        click.echo(f"{m.name}: {m.devices} device(s), {m.path}, engine {m.engine}")
    if pool.api_keys not in ("", "none"):
        click.echo(f"keys: {', '.join(read_keys(pool.api_keys).names)} ({pool.api_keys})")
    if pool.limits:
        click.echo(describe(pool.limits, budget_path(pool.source)))


# What the gateway and the builtin engine import: the serve extras, which a venv has
# (pip install 'acbslurm[serve]') and the Debian package does not carry.
SERVE_MODULES = ("starlette", "uvicorn", "prometheus_client", "torch")


def _need_serve_modules() -> None:
    missing = [m for m in SERVE_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        raise click.ClickException(
            f"acbslurm serve needs {', '.join(missing)}, which this Python "
            f"({sys.executable}) lacks: run pools from a venv with pip install "
            "'acbslurm[serve]' (the Debian package does not carry them; docs/admin-guide.md)"
        )


@click.command()
@click.argument("pool_file", required=False, type=click.Path(dir_okay=False))
@click.option(
    "--listen",
    metavar="HOST:PORT",
    callback=_listen,
    help="Gateway address (default: the pool's listen:).",
)
@click.option(
    "--demo",
    is_flag=True,
    help=(
        "Make small models once and serve a pool of models of 4, 4 and 8 devices (A:4, B:4, "
        "C:8); with --engine vllm also an embedding and a Whisper model (every route)."
    ),
)
@click.option(
    "--engine",
    type=click.Choice(["builtin", "vllm"]),
    default=None,
    help="With --demo: every model's engine (default builtin; vllm needs .venv-vllm).",
)
@click.option("--check", is_flag=True, help="Validate the pool file and exit.")
@click.option(
    "--address-file",
    type=click.Path(dir_okay=False),
    default="",
    help="Once every worker is up, write the gateway's address (JSON, mode 0600) here.",
)
def serve(
    pool_file: str | None,
    listen: str | None,
    demo: bool,
    engine: str | None,
    check: bool,
    address_file: str,
) -> None:
    """Serve the models of POOL_FILE behind one OpenAI-compatible gateway.

    Each model gets one long-lived worker that holds its GPUs only while it computes
    (broker leases); weights move to host memory when another model needs the room.
    Inside a Slurm job the job's broker is used; otherwise the pool starts its own
    (CPU stand-in devices when there is no GPU). SIGTERM stops everything.
    """
    if not check:
        _need_serve_modules()
    pool = _pool(pool_file, demo, listen, engine)
    if check:
        _show(pool)
        return
    from acbslurm.serve.runner import PoolServer  # the serve extra's modules, checked above

    server = PoolServer(pool, listen=listen, address_file=address_file)
    shown = server.listen[:-2] + ":<a free port>" if server.listen.endswith(":0") else server.listen
    click.echo(
        f"serving {', '.join(m.name for m in pool.models)} on http://{shown}/v1 "
        f"(broker: {server.choice.source}); {server.keys_text}"
        + (f"; address in {address_file} once ready" if address_file else "")
        + (f"\n{server.limits_text}" if pool.limits else ""),
        err=True,
    )
    server.run()
    for line in server.lease_summary:
        click.echo(line, err=True)
