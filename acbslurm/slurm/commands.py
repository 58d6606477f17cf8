"""The one entry point to Slurm's command-line tools.

Every Slurm command goes through ``slurm()``; a failure raises ``SlurmError`` with the
command, its exit code and stderr, which the CLI prints without a traceback. A bare
name (``sbatch``) runs from ``bin_dir``, else from ``$ACBSLURM_SLURM_BIN_DIR`` (of the
environment the command gets), else from PATH.
"""

from __future__ import annotations

import os

from acbslurm.errors import CommandError, SlurmError
from acbslurm.proc import Result, Started, Watchdog, run
from acbslurm.proc import start as start_process
from acbslurm.proc import stop as stop_process
from acbslurm.slurm.binaries import BIN_DIR_ENV, client

TYPE_CHECKING = False  # a lean-path module: CONTRIBUTING.md, "Lean imports"
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

SLURM_TIMEOUT = 60.0
# A query of the controller (squeue, scontrol show) that has not answered after this
# long is checked with `scontrol ping`, which answers at once. A controller that is
# down then ends the query: squeue --jobs=N spends 18 s in its own retries before it
# says so (two rounds of the controller's connect timeout), plain squeue 9 s.
CONTROLLER_PATIENCE = 1.0


class ControllerDown(SlurmError):
    """slurmctld does not answer: one line, what ``scontrol ping`` said."""

    def _message(self) -> str:
        return self.reason


def _bin_dir(env: Mapping[str, str] | None, extra_env: Mapping[str, str] | None) -> str:
    """The Slurm clients' directory the environment names ("" for PATH)."""
    return (extra_env or {}).get(BIN_DIR_ENV) or (os.environ if env is None else env).get(
        BIN_DIR_ENV, ""
    )


# Commands ``start`` began, by their argv, each read by the first ``slurm()`` call of
# the same argv (and nothing else asked of it). The prolog starts its scontrol while
# it asks squeue, so that it waits for one answer of slurmctld, not two in a row
# (slurm/allocation.py).
_STARTED: dict[tuple[str, ...], Started] = {}


def start(argv: Sequence[str]) -> None:
    """Start Slurm command ``argv`` now, in this process's environment, for the
    ``slurm(argv, ...)`` call that comes later to read (its errors are raised there)."""
    bin_dir = _bin_dir(None, None)
    resolved = [client(str(argv[0]), bin_dir), *map(str, argv[1:])]
    _STARTED[tuple(resolved)] = start_process(resolved)


def discard_started() -> None:
    """Stop and reap what ``start`` began and no ``slurm()`` call read (a command that
    ended before its query, or chose another way to ask)."""
    while _STARTED:
        stop_process(_STARTED.popitem()[1])


# complexity: every Slurm call passes here, and each option is one step on the way to proc.run (the
# binary's path, a controller query's watchdog, a process started early), with the controller's own
# error told apart where the watchdog raised it; split, one call's path would take several hops.
def slurm(
    argv: Sequence[str],
    *,
    input: str | None = None,
    user: str | int | None = None,
    env: Mapping[str, str] | None = None,
    extra_env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    check: bool = True,
    timeout: float = SLURM_TIMEOUT,
    bin_dir: str | None = None,
    controller: bool = False,
) -> Result:
    """Run a Slurm command (``sbatch``, ``squeue``...) as ``user`` (root only) or as us.

    ``env`` replaces this process's environment (a job inherits it); ``extra_env`` adds to it.
    ``controller``: the command only asks slurmctld (squeue, scontrol show); if it has
    not answered within CONTROLLER_PATIENCE and ``scontrol ping`` says the controller is
    down, it is stopped with ``ControllerDown``.
    """
    if bin_dir is None:
        bin_dir = _bin_dir(env, extra_env)
    argv = [client(str(argv[0]), bin_dir), *argv[1:]] if argv else argv
    watchdog = None
    if controller:  # stops a query that outlasts CONTROLLER_PATIENCE while slurmctld is down
        ping_env = dict(os.environ if env is None else env, **(extra_env or {}))
        watchdog = Watchdog(CONTROLLER_PATIENCE, lambda: controller_down(bin_dir, ping_env))
    plain = (env, extra_env, user, input, cwd) == (None, None, None, None, None)
    started = _STARTED.pop(tuple(map(str, argv)), None) if plain else None
    try:
        return run(
            argv,
            input=input,
            user=user,
            env=env,
            extra_env=extra_env,
            cwd=cwd,
            check=check,
            timeout=timeout,
            error=SlurmError,
            watchdog=watchdog,
            started=started,
        )
    except SlurmError as exc:
        if watchdog is not None and exc.returncode is None and exc.reason.startswith(_DOWN):
            raise ControllerDown(exc.argv, None, reason=exc.reason) from None
        raise


_DOWN = "Unable to contact slurm controller"


def controller_down(bin_dir: str, env: Mapping[str, str]) -> str:
    """Why slurmctld does not answer (what ``scontrol ping`` says), or "" when it does.

    Only a clear DOWN counts: a ping that fails otherwise (no scontrol, a timeout) lets
    the query run on and speak for itself.
    """
    try:
        r = run([client("scontrol", bin_dir), "ping"], env=env, check=False, timeout=10)
    except CommandError:  # no scontrol, a ping that hangs: the query speaks for itself
        return ""
    down = [line.strip() for line in r.stdout.splitlines() if line.rstrip().endswith("DOWN")]
    if r.returncode == 0 or not down:
        return ""
    return f"{_DOWN}: scontrol ping says {'; '.join(down)}"
