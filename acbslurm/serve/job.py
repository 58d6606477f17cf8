"""A pool job: ``serve: POOL.yaml`` in a job spec, checked before anything queues.

The spec layer knows only that a job serves a pool file; this module (a layer above)
reads the pool file, so that ``acbslurm submit`` refuses a bad pool with its
``file:line`` errors (exit 2) and asks Slurm for exactly the GPUs the pool needs: its
largest gang, unless the spec asks for more.
"""

from __future__ import annotations

import dataclasses

from acbslurm.serve.errors import PoolError
from acbslurm.serve.pool import PoolSpec, load_pool
from acbslurm.spec import JobSpec


def pool_job(spec: JobSpec, check_paths: bool = True) -> JobSpec:
    """``spec`` with its GPU count set from its pool file; unchanged for other jobs.

    ``check_paths``: also check that every model folder holds ``config.json`` and
    weights (off for ``--no-check``, where the folders exist only on the nodes).
    """
    if spec.serve is None:
        return spec
    pool = load_pool(spec.serve.pool, check_paths=check_paths)
    problems = _pool_problems(pool)
    need = max(m.devices for m in pool.models)
    if spec.gpus is None:
        gpus = str(need)
    else:
        gpus = spec.gpus
        if spec.gpu_count < need:
            largest = max(pool.models, key=lambda m: m.devices)
            problems.append(
                f"{spec.source}: gpus: {spec.gpu_count} GPU(s) are fewer than model "
                f"{largest.name} needs ({need}, {largest.where}); leave 'gpus' out to ask "
                "for the pool's largest gang"
            )
    if problems:
        raise PoolError("invalid pool job:\n  " + "\n  ".join(problems))
    return dataclasses.replace(spec, gpus=gpus)


def _pool_problems(pool: PoolSpec) -> list[str]:
    """What a pool may say on a bare node but not inside its own job."""
    out = []
    if pool.devices != "auto":
        out.append(
            f"{pool.where('devices')}: devices: {pool.devices}: a pool job serves on the "
            "job's GPUs; use devices: auto (or leave it out)"
        )
    if pool.broker:
        out.append(
            f"{pool.where('broker')}: broker: a pool job uses its own job's broker; remove broker:"
        )
    return out
