"""``agarun [OPTIONS] -- python app.py ...``: run an unmodified PyTorch program under the broker.

agarun checks the options and the broker, then replaces itself with the program's own
interpreter running ``acbslurm.broker.bootstrap``, which installs the lease hooks
(``runtime.install``) and runs the script or module as ``__main__``. The program's
exit code is agarun's exit code.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import click

from acbslurm.broker.address import default_address, parse_address
from acbslurm.clitypes import FiniteFloat
from acbslurm.errors import AcbslurmError
from acbslurm.units import size_bytes

ENV_PREFIX = "ACBSLURM_AGARUN_"


def _split_python(command: tuple[str, ...]) -> tuple[str, list[str]]:
    """(interpreter, its arguments after the interpreter) for ``python [-u] X.py|-m M ...``."""
    if not command:
        raise click.UsageError("missing the program: agarun [OPTIONS] -- python app.py [ARGS]")
    exe = command[0]
    if not Path(exe).name.startswith("python"):
        raise click.UsageError(
            f"agarun runs Python programs: expected `python SCRIPT` or `python -m MODULE`, "
            f"got {exe!r}"
        )
    rest = list(command[1:])
    if not rest:
        raise click.UsageError(f"{exe!r} needs a script or -m MODULE after it")
    return exe, rest


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--broker",
    "address",
    metavar="ADDR",
    help="Broker address (default: ACBSLURM_BROKER_ADDRESS / the job's socket).",
)
@click.option(
    "--device",
    "device_type",
    type=click.Choice(["cuda", "cpu"]),
    default="cuda",
    show_default=True,
    help="What the leases stand for: CUDA GPUs, or the CPU (CPU stand-in brokers).",
)
@click.option(
    "--memory",
    default="0",
    show_default=True,
    metavar="SIZE",
    help="Memory the program needs on its device (e.g. 40G); 0 = the whole device.",
)
@click.option(
    "--idle-ms",
    type=FiniteFloat(min=1),
    default=50.0,
    show_default=True,
    help="Release the lease after this many ms without device work.",
)
@click.option(
    "--stats",
    "stats_file",
    metavar="FILE",
    default="",
    help="Write lease/eviction counters as JSON to FILE at exit.",
)
@click.option(
    "--connect-timeout",
    type=FiniteFloat(min=0.1),
    default=5.0,
    show_default=True,
    help="Seconds to wait for the broker at start.",
)
@click.option(
    "--reconnect-timeout",
    type=FiniteFloat(min=0),
    default=30.0,
    show_default=True,
    help="Seconds to wait for the broker to come back after losing it; then the "
    "program ends with an error at its next device call.",
)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def cli(
    address: str | None,
    device_type: str,
    memory: str,
    idle_ms: float,
    stats_file: str,
    connect_timeout: float,
    reconnect_timeout: float,
    command: tuple[str, ...],
) -> None:
    """Run `python app.py ...` so that its GPU work happens only under broker leases."""
    exe, rest = _split_python(command)
    try:
        mem = size_bytes(memory)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--memory'") from None
    try:
        addr = parse_address(address or default_address())
    except AcbslurmError as exc:
        raise click.BadParameter(str(exc), param_hint="'--broker'") from None
    # Fail here, with a clear message, rather than inside the program.
    from acbslurm.broker.client import BrokerClient  # grpc: the optional broker extra

    BrokerClient(addr, name="agarun-probe", connect_timeout=connect_timeout).close()
    env = dict(os.environ)
    env.update(
        {
            f"{ENV_PREFIX}BROKER": addr,
            f"{ENV_PREFIX}DEVICE": device_type,
            f"{ENV_PREFIX}MEMORY": str(mem),
            f"{ENV_PREFIX}IDLE": str(idle_ms / 1000.0),
            f"{ENV_PREFIX}STATS": stats_file and os.path.abspath(stats_file),
            f"{ENV_PREFIX}TIMEOUT": str(connect_timeout),
            f"{ENV_PREFIX}RECONNECT": str(reconnect_timeout),
        }
    )
    # The program's interpreter must import acbslurm: put our package's folder first.
    pkg_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH")) if p)
    # A user's own Python (a conda env with torch) may lack grpc: bootstrap then falls
    # back to ours when the versions match, and otherwise says what to install.
    env["ACBSLURM_AGARUN_SITE"] = os.pathsep.join(_grpc_sites())
    env["ACBSLURM_AGARUN_PYVER"] = "{}.{}".format(*sys.version_info[:2])
    argv = [exe, "-m", "acbslurm.broker.bootstrap", *rest]
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(exe, argv, env)  # noqa: S606 - replacing agarun with the program is the point
    except OSError as exc:
        raise click.UsageError(f"cannot start {exe!r}: {exc.strerror}") from None


def _grpc_sites() -> list[str]:
    """The folders agarun's grpc and protobuf are imported from."""
    sites: list[str] = []
    for name in ("grpc", "google.protobuf"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            depth = name.count(".") + 2  # .../site-packages/grpc/__init__.py
            site = str(Path(spec.origin).parents[depth - 1])
            if site not in sites:
                sites.append(site)
    return sites


def main(argv: list[str] | None = None) -> None:
    """Console entry point (errors become one line and an exit code)."""
    try:
        cli.main(args=argv, prog_name="agarun", standalone_mode=False)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        sys.exit(130)
    except AcbslurmError as exc:
        click.echo(f"agarun: error: {exc}", err=True)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
