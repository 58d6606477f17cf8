"""A follower of a model's worker group: ``python -m acbslurm.serve.engines.builtin.follower``.

Started by the gateway (here, or with ``srun`` on another node of the job;
``placement``) once the leader has opened its rendezvous. It joins the group, loads
its stage of the model (weights in host memory: it holds no lease), tells the
leader its weight bytes (or why it cannot run), then does the leader's commands
until STOP or until the leader goes away (``group``).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from acbslurm.serve.engines import follower_args
from acbslurm.serve.modelproc import load_causal_lm, prepare_model_process
from acbslurm.serve.pool import ModelSpec

# residency, stages and group import torch: in the functions, after main's
# prepare_model_process has set the environment torch and transformers read at import.

EXIT_REFUSED = 3  # this stage cannot run (the leader tells the gateway why)
EXIT_GROUP = 5  # the leader went away or failed


def load_stage(spec: ModelSpec, rank: int, device: str) -> tuple[Any, Any]:
    """(stage, residency) of ``rank``: the model cut to its stage, weights off
    the device (host memory) until the leader's first RESTORE."""
    from acbslurm.serve.engines.builtin.residency import Residency
    from acbslurm.serve.engines.builtin.stages import make_stage

    model, _dtype = load_causal_lm(spec)
    stage = make_stage(model, rank, int(spec.procs))
    return stage, Residency(stage.model, device)


def run(spec: ModelSpec, rank: int, rendezvous: str, device: str) -> int:
    from acbslurm.serve.engines.builtin import group as pipeline

    procs = int(spec.procs)
    host, port = rendezvous.rsplit(":", 1)
    store = pipeline.rendezvous(host.strip("[]"), int(port), rank, procs)
    pipeline.join(store, rank, procs)
    try:
        stage, residency = load_stage(spec, rank, device)
        info = pipeline.Peer(True, "", residency.weights)
    except Exception as exc:
        info = pipeline.Peer(False, f"stage {rank}: {exc}", 0)
    pipeline.exchange(info, procs)
    if not info.ok:
        pipeline.header()  # the leader's STOP (or its going away)
        return EXIT_REFUSED
    pipeline.Follower(stage, residency, device).serve()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = follower_args("acbslurm.serve.engines.builtin.follower", argv)
    spec = ModelSpec.from_dict(json.loads(args.spec))
    prepare_model_process()
    try:
        return run(spec, args.rank, args.rendezvous, args.device)
    except RuntimeError as exc:  # gloo: the leader closed its connections
        first = str(exc).split(". ")[0]
        print(f"follower {args.rank}: the group's leader went away ({first})", file=sys.stderr)
        return EXIT_GROUP


if __name__ == "__main__":
    sys.exit(main())
