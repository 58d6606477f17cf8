"""slurmdbd, slurmctld and slurmd of the sandbox, and its accounts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from acbslurm.errors import SetupError
from acbslurm.sandbox import nodenet
from acbslurm.sandbox.layout import Layout, Params
from acbslurm.sandbox.procs import Proc, spawn, wait_for
from acbslurm.slurm.cluster import slurmctld_up
from acbslurm.slurm.commands import slurm
from acbslurm.slurm.jobs import cancel_and_wait
from acbslurm.slurm.versions import DAEMONS, SlurmInstall, parse_release


def install_of(layout: Layout) -> SlurmInstall:
    """The Slurm the sandbox at ``layout`` runs (Debian's when it has no parameters yet)."""
    p = layout.load_params()
    return p.slurm if p else SlurmInstall()


def slurm_env(layout: Layout) -> dict[str, str]:
    """Root's environment for the sandbox's Slurm daemons and clients: its install's
    clients first on PATH (a 22.05 client cannot talk to a 25.11 daemon)."""
    install = install_of(layout)
    return {
        "PATH": install.path_env(),
        "SLURM_CONF": str(layout.slurm_conf),
        "ACBSLURM_SLURM_BIN_DIR": install.bin_dir,
        "HOME": "/root",
        "LANG": "C.UTF-8",
    }


def installed_release(prefix: str) -> str:
    """The release of the Slurm installed under ``prefix`` (``slurmctld -V``)."""
    install = SlurmInstall(prefix=prefix)
    missing = [d for d in DAEMONS if not Path(install.daemon(d)).exists()]
    if missing:
        raise SetupError(
            f"--slurm-prefix {prefix}: no {', '.join(missing)} in {install.sbin_dir}; "
            "name the --prefix Slurm was configured with"
        )
    out = slurm([install.daemon("slurmctld"), "-V"], timeout=20).stdout
    try:
        y, m, patch = parse_release(out)
    except ValueError:
        raise SetupError(f"{install.daemon('slurmctld')} -V said {out.strip()!r}") from None
    return f"{y:02d}.{m:02d}.{patch}"


def slurmctld_answers(layout: Layout) -> bool:
    """Whether the sandbox's slurmctld answers its clients."""
    return slurmctld_up(env=slurm_env(layout))


def _client(layout: Layout, argv: list[str], timeout: float = 20) -> str:
    # Through slurm/'s one entry point, as every Slurm command: its errors name the
    # command; the sandbox's own install comes first on slurm_env's PATH.
    return slurm(argv, env=slurm_env(layout), timeout=timeout).stdout


def prepare(layout: Layout, params: Params) -> None:
    for d in ("slurmctld", "slurmd"):
        (layout.state / d).mkdir(parents=True, exist_ok=True)
    if params.nodes > 1:
        for node in params.node_names:
            (layout.state / "slurmd" / node).mkdir(exist_ok=True)


def _start(
    layout: Layout,
    marker: str,
    name: str,
    argv: list[str],
    ready: Callable[[], bool],
    interval: float,
) -> Proc:
    """Start one Slurm daemon in the foreground and wait until it answers."""
    log = layout.log_file(name)
    p = spawn(name, argv, run_dir=layout.run, log_file=log, marker=marker, env=slurm_env(layout))
    wait_for(name, ready, proc=p, log_file=log, timeout=60, interval=interval)
    return p


def start_slurmdbd(layout: Layout, marker: str) -> Proc:
    # slurmdbd has no -f: it reads slurmdbd.conf beside $SLURM_CONF.
    return _start(
        layout,
        marker,
        "slurmdbd",
        [install_of(layout).daemon("slurmdbd"), "-D"],
        lambda: _dbd_answers(layout),
        interval=0.5,
    )


def _dbd_answers(layout: Layout) -> bool:
    _client(layout, ["sacctmgr", "-n", "-P", "list", "cluster"], 5)  # raises until it answers
    return True


def ensure_accounts(layout: Layout, params: Params) -> None:
    """Cluster, and an account and association per sandbox user (idempotent)."""
    clusters = _client(layout, ["sacctmgr", "-n", "-P", "list", "cluster", "format=cluster"])
    if params.cluster not in clusters.split():
        _client(layout, ["sacctmgr", "-i", "add", "cluster", params.cluster])
    accounts = _client(layout, ["sacctmgr", "-n", "-P", "list", "account", "format=account"])
    where = ["where", f"cluster={params.cluster}"]
    assocs = _client(
        layout, ["sacctmgr", "-n", "-P", "list", "assoc", "format=user,account", *where]
    ).split()
    for user in (params.user, params.user2):
        if user not in accounts.split():
            _client(layout, ["sacctmgr", "-i", "add", "account", user, f"cluster={params.cluster}"])
        if f"{user}|{user}" not in assocs:
            account = [f"account={user}", f"defaultaccount={user}"]
            _client(
                layout,
                ["sacctmgr", "-i", "add", "user", user, *account, f"cluster={params.cluster}"],
            )


def start_slurmctld(layout: Layout, marker: str) -> Proc:
    return _start(
        layout,
        marker,
        "slurmctld",
        [install_of(layout).daemon("slurmctld"), "-D", "-f", str(layout.slurm_conf)],
        lambda: slurmctld_answers(layout),
        interval=0.3,
    )


def start_slurmd(layout: Layout, params: Params, marker: str, node: str) -> Proc:
    """The slurmd of ``node`` (one of ``params.node_names``): ``-N`` names the node it
    is, whose Port, GPUs and (with %n in slurm.conf) spool, pid file and log it takes;
    ``-f`` its slurm.conf (its own munged's socket)."""
    name = layout.slurmd_component(params, node)
    conf = str(layout.node_slurm_conf(params, node))
    log = layout.log_file(name)
    argv = [params.slurm.daemon("slurmd"), "-D", "-f", conf, "-N", node]
    if params.node_network:
        argv = nodenet.node_argv(layout, params, node, argv)
    p = spawn(
        name,
        argv,
        run_dir=layout.run,
        log_file=log,
        marker=marker,
        env={**slurm_env(layout), "SLURM_CONF": conf},
    )
    ready = lambda: slurmd_answers(node_state(layout, node))  # noqa: E731
    wait_for(name, ready, proc=p, log_file=log, timeout=60, interval=0.3)
    return p


def node_states(layout: Layout) -> dict[str, str]:
    """Every node's state as slurmctld has it now, lower case (e.g. "idle",
    "mixed+drain"), in one call.

    scontrol, not sinfo: sinfo keeps showing "mixed" for up to a minute after the last
    GPU job ended, while slurmctld already has the node idle.
    """
    out = _client(layout, ["scontrol", "show", "node", "-o"], 5)
    states = {}
    for line in out.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "NodeName" in fields:
            states[fields["NodeName"]] = fields.get("State", "unknown").lower()
    return states


def node_state(layout: Layout, node: str) -> str:
    """``node``'s state (see ``node_states``)."""
    return node_states(layout).get(node, "unknown")


def slurmd_answers(state: str) -> bool:
    """True when slurmctld hears from slurmd (a drained node still answers)."""
    base, *flags = state.split("+")
    return base in ("idle", "mixed", "allocated", "completing") and "not_responding" not in flags


def resume_if_drained(layout: Layout, params: Params) -> str | None:
    """A failed hook drains its node; a sandbox `up` puts it back and says why it was."""
    notes = []
    for node in params.node_names:
        out = _client(layout, ["scontrol", "show", "node", node, "-o"], 5)
        fields = dict(f.split("=", 1) for f in out.split() if "=" in f)
        state = fields.get("State", "").lower()
        if "drain" in state or state.startswith("down"):
            reason = out.split("Reason=", 1)[1].strip() if "Reason=" in out else ""
            _client(layout, ["scontrol", "update", f"nodename={node}", "state=resume"])
            notes.append(f"node {node} was {state} ({reason}); resumed")
    return "; ".join(notes) or None


def cancel_all(layout: Layout, timeout: float = 20) -> None:
    """Cancel every job and wait for them to leave the node (before slurmd stops)."""
    cancel_and_wait(env=slurm_env(layout), timeout=timeout)


def run_sacctmgr_ping(layout: Layout) -> None:
    _dbd_answers(layout)
