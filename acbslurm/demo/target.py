"""Where the demo runs: the sandbox's cluster, as the plain values the experiment needs.

The demo reaches the sandbox only through these environments, passed to every Slurm
call and to `acbslurm report`; this process's own environment is never changed.
"""

from __future__ import annotations

import os

from acbslurm.config import load_settings
from acbslurm.errors import SetupError
from acbslurm.sandbox import Sandbox
from acbslurm.values import frozen


@frozen
class Target:
    root: str
    user: str  # the sandbox user the jobs run as
    uid: int
    inventory: dict[int, str]  # device minor -> GPU UUID
    record_dir: str  # where the prolog writes job records
    # Our own squeue/sacct/scontrol and `acbslurm report`: this process's environment
    # pointed at the sandbox (SLURM_CONF, ACBSLURM_DB_CONFIG, ACBSLURM_CLUSTER...).
    slurm_env: dict[str, str]
    # sbatch's, which the job inherits: the sandbox user's, with acbslurm importable.
    job_env: dict[str, str]
    home: str
    acbslurm_cmd: tuple[str, ...]  # how a job calls acbslurm


def sandbox_target(sandbox_dir: str | None) -> Target:
    """The sandbox at ``sandbox_dir`` (default: $ACBSLURM_SANDBOX_DIR...), which must be up."""
    sb = Sandbox.load(sandbox_dir)
    params = sb.params
    if not sb.is_up():
        raise SetupError(f"the sandbox at {sb.layout.root} is not up; run `acbslurm sandbox up`")
    job_env = {**sb.user_env(), "PYTHONPATH": params.pythonpath}
    return Target(
        root=str(sb.layout.root),
        user=params.user,
        uid=sb.uid,
        inventory={g.minor: g.uuid for g in sb.gpus},
        record_dir=load_settings(str(sb.layout.acbslurm_conf)).record_dir,
        slurm_env={**os.environ, **sb.env()},
        job_env=job_env,
        home=job_env["HOME"],
        acbslurm_cmd=(params.python, "-m", "acbslurm"),
    )
