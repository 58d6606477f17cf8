"""The one entry point to Slurm's command-line tools.

Every Slurm command goes through ``slurm()``; a failure raises ``SlurmError`` with the
command, its exit code and stderr, which the CLI prints without a traceback.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from acbslurm.errors import SlurmError
from acbslurm.proc import Result, run

SLURM_TIMEOUT = 60.0


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
) -> Result:
    """Run a Slurm command (``sbatch``, ``squeue``...) as ``user`` (root only) or as us.

    ``env`` replaces this process's environment (a job inherits it); ``extra_env`` adds to it.
    """
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
    )
