"""``acbslurm broker serve|status``: the GPU broker daemon and a look at its state."""

from __future__ import annotations

import json
import re

import click

from acbslurm.broker import core
from acbslurm.broker.address import default_address, parse_address
from acbslurm.broker.devices import resolve_devices
from acbslurm.broker.grpc_tuning import SERVER_EXPERIMENTS, inline_io
from acbslurm.clitypes import FiniteFloat
from acbslurm.config import load_settings
from acbslurm.errors import AcbslurmError


def _address(value: str | None) -> str:
    try:
        return parse_address(value or default_address())
    except AcbslurmError as exc:
        raise click.BadParameter(str(exc), param_hint="'--listen/--broker'") from None


@click.group()
def broker() -> None:
    """The ACB-style GPU broker: lease GPUs to programs per request."""


@broker.command()
@click.option(
    "--listen",
    metavar="ADDR",
    help="unix:/PATH or HOST:PORT. Default: ACBSLURM_BROKER_ADDRESS, inside a Slurm job "
    "the job's socket <job_runtime_dir>/$SLURM_JOB_ID/broker.sock, else broker_address.",
)
@click.option(
    "--policy",
    type=click.Choice(["fifo", "quantum"]),
    default="fifo",
    show_default=True,
    help="fifo: strict arrival order. quantum: also ask a holder to yield once the "
    "first waiter has waited --quantum seconds.",
)
@click.option(
    "--quantum",
    type=FiniteFloat(min=0.001),
    default=1.0,
    show_default=True,
    help="Seconds a waiter waits before the holder is asked to yield (policy quantum).",
)
@click.option(
    "--backfill/--no-backfill",
    default=False,
    show_default=True,
    help="While the first waiter waits for devices a lease holds, lend free devices to "
    "later requests that fit; they are asked to yield once only they stand in its way.",
)
@click.option(
    "--devices",
    "device_spec",
    default="auto",
    show_default=True,
    metavar="SPEC",
    help="auto (the Slurm job's GPUs inside a job, else the static inventory if "
    "configured, else NVML), slurm, inventory, nvml, or cpu:N[:SIZE] (CPU stand-ins).",
)
@click.option(
    "--socket-mode",
    default="600",
    show_default=True,
    metavar="OCTAL",
    help="Permissions of the unix socket (666 lets every user of a node use it).",
)
@click.option(
    "--recovery-grace",
    type=FiniteFloat(min=0),
    default=10.0,
    show_default=True,
    metavar="SECONDS",
    help="After an unclean stop of the previous broker on this socket (its state file "
    "<socket>.state is still there), grant nothing until its sessions have come back, "
    "or for at most this long. A normal start does not wait.",
)
def serve(
    listen: str | None,
    policy: str,
    quantum: float,
    backfill: bool,
    device_spec: str,
    socket_mode: str,
    recovery_grace: float,
) -> None:
    """Run the broker in the foreground until SIGTERM or Ctrl-C."""
    inline_io(SERVER_EXPERIMENTS)  # before grpc is imported
    from acbslurm.broker.server import serve as run_server  # imports grpc: after inline_io

    address = _address(listen)
    # Octal digits in ASCII only: int(..., 8) also reads Arabic-Indic digits and "6_00".
    if not (socket_mode.isascii() and re.fullmatch(r"[0-7]{1,4}", socket_mode)):
        raise click.BadParameter(
            f"{socket_mode!r} is not an octal mode", param_hint="'--socket-mode'"
        )
    mode = int(socket_mode, 8)
    if not 0 <= mode <= 0o777:
        raise click.BadParameter(f"{socket_mode!r} is out of range", param_hint="'--socket-mode'")
    try:
        found = resolve_devices(device_spec, settings=load_settings())
    except AcbslurmError as exc:
        if device_spec.startswith("cpu") or "device spec" in str(exc):
            raise click.BadParameter(str(exc), param_hint="'--devices'") from None
        raise
    state = core.Broker(found.devices, policy=policy, quantum=quantum, backfill=backfill)
    ids = ", ".join(d.id for d in found.devices)
    click.echo(f"broker: {len(found.devices)} device(s) from {found.source}: {ids}", err=True)
    run_server(
        state,
        address,
        source=found.source,
        socket_mode=mode,
        recovery_grace=recovery_grace,
        # Said only once the socket accepts connections: scripts may wait for this line.
        on_ready=lambda: click.echo(
            f"broker: listening on {address} (policy {policy}{', backfill' if backfill else ''})",
            err=True,
        ),
    )


@broker.command()
@click.option("--broker", "address", metavar="ADDR", help="Broker address (as for serve).")
@click.option(
    "--timeout",
    type=FiniteFloat(min=0.1),
    default=3.0,
    show_default=True,
    help="Seconds to wait for the broker.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the state as JSON.")
# complexity: the text follows the status's parts in order, each conditional one optional part
# (recovery, a holder, a waiting client); a helper per part would be a one-use printer.
def status(address: str | None, timeout: float, as_json: bool) -> None:
    """Show the broker's devices, holders, waiting clients and counters."""
    from acbslurm.broker.status import fetch_status  # imports grpc: serve's must follow inline_io

    st = fetch_status(_address(address), timeout)
    if as_json:
        click.echo(json.dumps(st, indent=2))
        return
    click.echo(
        f"policy {st['policy']} (quantum {st['quantum_seconds']:g}s), devices from "
        f"{st['source']}; grants {st['grants']}, evictions {st['evictions']}, "
        f"yields asked {st['yields_asked']}, disconnects {st['disconnects']}"
        + (f", backfills {st['backfills']}" if st["backfill"] else "")
    )
    if st["recovering"]:
        click.echo(
            f"  recovering after an unclean stop: no grants for up to "
            f"{st['recovery_seconds_left']:.1f}s more, or until {st['sessions_expected']} "
            "session(s) of the previous broker are back"
        )
    names = {c["id"]: f"{c['name']}[{c['pid']}]#{c['id']}" for c in st["clients"]}
    for d in st["devices"]:  # its holder (or free), for how long, residents
        holder = names.get(d["holder"], "free") if d["holder"] else "free"
        held = f" for {d['held_seconds']:.2f}s" if d["holder"] else ""
        res = ", ".join(f"#{c}:{b}B" for c, b in d["residents"].items()) or "none"
        click.echo(f"  {d['id']}: {holder}{held}; resident: {res}")
    lane = sum(1 for c in st["clients"] if c["on_lane"])
    click.echo(f"  clients: {len(st['clients'])} ({lane} on the local lane)")
    for c in st["clients"]:
        if c["waiting_count"]:
            click.echo(
                f"  waiting: {names[c['id']]} for {c['waiting_count']} device(s), "
                f"{c['waiting_seconds']:.2f}s"
            )
