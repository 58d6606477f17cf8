"""A pool job: ``serve: POOL.yaml`` in a job spec, checked before anything queues.

The spec layer knows only that a job serves a pool file; this module (a layer above)
reads the pool file, so that ``acbslurm submit`` refuses a bad pool with its
``file:line`` errors (exit 2) and asks Slurm for exactly the GPUs the pool needs: its
largest gang, unless the spec asks for more.

A job of several nodes (``nodes: 2``): ``gpus`` counts per node (Slurm's ``--gres``),
and every model must fit what one node contributes. A model of one process keeps
its whole gang on one node; a model of ``procs: N`` runs one process per node, each
on ``devices / N`` GPUs of its own node, so N may not exceed the job's nodes.
"""

from __future__ import annotations

from acbslurm.serve.errors import PoolError
from acbslurm.serve.pool import ModelSpec, PoolSpec, load_pool
from acbslurm.spec import JobSpec
from acbslurm.values import replace


def pool_job(spec: JobSpec, check_paths: bool = True) -> JobSpec:
    """``spec`` with its GPU count set from its pool file; unchanged for other jobs.

    ``check_paths``: also check that every model folder holds ``config.json`` and
    weights (off for ``--no-check``, where the folders exist only on the nodes).
    """
    if spec.serve is None:
        return spec
    pool = load_pool(spec.serve.pool, check_paths=check_paths)
    problems = []  # what a pool may say on a bare node but not inside its own job
    if pool.devices != "auto":
        problems.append(
            f"{pool.where('devices')}: devices: {pool.devices}: a pool job serves on the "
            "job's GPUs; use devices: auto (or leave it out)"
        )
    if pool.broker:
        problems.append(
            f"{pool.where('broker')}: broker: a pool job uses its own job's broker; remove broker:"
        )
    nodes = int(spec.nodes or 1)
    problems += _procs_problems(pool, nodes)
    need = max(node_share(m, nodes) for m in pool.models)
    if spec.gpus is None:
        gpus = str(need)
    else:
        gpus = spec.gpus
        if spec.gpu_count < need:
            largest = max(pool.models, key=lambda m: node_share(m, nodes))
            each = " per node" if nodes > 1 else ""
            problems.append(
                f"{spec.source}: gpus: {spec.gpu_count} GPU(s){each} are fewer than model "
                f"{largest.name} needs{each} ({need}, {largest.where}); leave 'gpus' out "
                "to ask for the pool's largest gang"
            )
    if problems:
        raise PoolError("invalid pool job:\n  " + "\n  ".join(problems))
    return replace(spec, gpus=gpus)


def node_share(model: ModelSpec, nodes: int) -> int:
    """GPUs ``model`` needs on one node of a job of ``nodes`` nodes."""
    if nodes == 1 or model.procs == 1:
        return model.devices
    return model.devices // model.procs


def _procs_problems(pool: PoolSpec, nodes: int) -> list[str]:
    """On several nodes each process of a model has a node of its own."""
    if nodes == 1:
        return []
    return [
        f"{m.where}: model {m.name}: procs: {m.procs} processes on a {nodes}-node job: "
        f"each runs on a node of its own, so at most {nodes} (or run the job on one node)"
        for m in pool.models
        if m.procs > nodes
    ]
