"""Every GPU of a running job on every node, in the job's node order.

A job step sees only its own node's GPUs (``ACBSLURM_GPU_UUIDS``, ``SLURM_JOB_GPUS``).
A program that lends all of a multi-node job's GPUs (the pool's broker,
docs/serve.md) reads them from the job itself: each node's prolog writes its GPUs
into the job's ``AdminComment`` (``acbslurm:gpus=NODE:INDEX=UUID,...``,
``gpu_history``), and the job's ``NodeList`` gives the order. With
``PrologFlags=Alloc`` every prolog has finished before the batch step starts; the
reader still waits a little for a token that is missing (a prolog retrying its write,
``gpu_history._settled``) before it gives up.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from acbslurm.errors import SlurmError
from acbslurm.gpuvalue import Gpu
from acbslurm.slurm.allocation import query_job_facts
from acbslurm.slurm.commands import slurm
from acbslurm.slurm.gpu_history import parse_gpus

WAIT = 30.0  # seconds for every node's token to appear
_POLL = 0.25


def gpus_in_comment(comment: str, nodes: Sequence[str]) -> list[Gpu]:
    """The GPUs of ``nodes`` in a job's AdminComment (squeue's), in the order of
    ``nodes``, each node's by Slurm's index: the one reader of the prologs' tokens for a
    running job."""
    rank = {n: i for i, n in enumerate(nodes)}
    gpus = [g for g in parse_gpus(comment) if g.node in rank]
    gpus.sort(key=lambda g: (rank[g.node], -1 if g.index is None else g.index))
    return gpus


def job_gpus_by_node(
    job_id: str, bin_dir: str = "", timeout: float = 5.0, wait: float = WAIT
) -> list[Gpu]:
    """Ask slurmctld (squeue: the job's NodeList and AdminComment, never from text a
    user can shape) for the GPUs of job ``job_id`` on all its nodes.

    Raises ``SlurmError`` naming the nodes whose GPUs are not recorded after ``wait``
    seconds (a prolog that did not run acbslurm's hook, or a job without GPUs there).
    """
    deadline = time.monotonic() + wait
    while True:
        facts = query_job_facts(job_id, bin_dir, timeout)
        gpus = gpus_in_comment(facts.admin_comment, facts.nodes)
        missing = [n for n in facts.nodes if not any(g.node == n for g in gpus)]
        if facts.nodes and not missing:
            return gpus
        if time.monotonic() > deadline:
            what = ", ".join(missing) if facts.nodes else "(no NodeList: is the job running?)"
            raise SlurmError(
                ["squeue", "-j", job_id],
                0,
                reason=(
                    f"job {job_id}: no GPUs recorded in its AdminComment for node(s) {what} "
                    f"after {wait:g} s (acbslurm's prolog writes them; docs/admin-guide.md)"
                ),
            )
        time.sleep(_POLL)


def node_address(node: str, bin_dir: str = "", timeout: float = 5.0) -> str:
    """The address slurmd of ``node`` is reached at (``NodeAddr``; the node's name when
    Slurm gives none): for a node name that does not resolve (several slurmd on one
    host, such as the sandbox's, or a site whose node names are not in DNS)."""
    line = slurm(["scontrol", "show", "node", "-o", node], timeout=timeout, bin_dir=bin_dir).stdout
    for tok in line.split():
        if tok.startswith("NodeAddr="):
            return tok.partition("=")[2] or node
    return node
