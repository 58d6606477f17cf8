"""Started by agarun as ``python -m acbslurm.broker.bootstrap SCRIPT|-m MODULE ARGS...``.

Installs the lease hooks from the ``ACBSLURM_AGARUN_*`` variables, then runs the
program as ``__main__`` with the ``sys.argv`` it would have had without agarun.
"""

from __future__ import annotations

import os
import runpy
import sys


def main() -> None:
    from acbslurm.broker.grpc_tuning import CLIENT_EXPERIMENTS, inline_io

    inline_io(CLIENT_EXPERIMENTS)  # before grpc is imported
    from acbslurm.broker.client import BrokerClient
    from acbslurm.broker.runtime import install

    env = os.environ
    args = sys.argv[1:]
    for flag in ("-u", "-B", "-O"):  # interpreter flags that may precede the script
        while args and args[0] == flag:
            args = args[1:]
    client = BrokerClient(
        env["ACBSLURM_AGARUN_BROKER"],
        name=os.path.basename(args[1] if args[:1] == ["-m"] and len(args) > 1 else args[0]),
        connect_timeout=float(env.get("ACBSLURM_AGARUN_TIMEOUT", "5")),
        reconnect_timeout=float(env.get("ACBSLURM_AGARUN_RECONNECT", "30")),
    )
    install(
        client,
        env.get("ACBSLURM_AGARUN_DEVICE", "cuda"),
        memory=int(env.get("ACBSLURM_AGARUN_MEMORY", "0")),
        idle=float(env.get("ACBSLURM_AGARUN_IDLE", "0.05")),
        stats_file=env.get("ACBSLURM_AGARUN_STATS", ""),
    )
    # The hooks are this thread's; the program must not see them in its namespace.
    if args[:1] == ["-m"]:
        sys.argv = [args[1], *args[2:]]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(args)
        sys.path.insert(0, os.path.dirname(os.path.abspath(args[0])))
        runpy.run_path(args[0], run_name="__main__")


if __name__ == "__main__":
    main()
