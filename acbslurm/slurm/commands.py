"""The one entry point to Slurm's command-line tools.

Every Slurm command goes through ``slurm()``; a failure raises ``SlurmError`` with the
command, its exit code and stderr, which the CLI prints without a traceback. A bare
name (``sbatch``) runs from ``bin_dir``, else from ``$ACBSLURM_SLURM_BIN_DIR`` (of the
environment the command gets), else from PATH.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from acbslurm.errors import SlurmError
from acbslurm.proc import Result, run
from acbslurm.slurm.binaries import BIN_DIR_ENV, client

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
    bin_dir: str | None = None,
) -> Result:
    """Run a Slurm command (``sbatch``, ``squeue``...) as ``user`` (root only) or as us.

    ``env`` replaces this process's environment (a job inherits it); ``extra_env`` adds to it.
    """
    if bin_dir is None:
        bin_dir = (extra_env or {}).get(BIN_DIR_ENV) or (os.environ if env is None else env).get(
            BIN_DIR_ENV, ""
        )
    argv = [client(str(argv[0]), bin_dir), *argv[1:]] if argv else argv
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
