"""Started by agarun as ``python -m acbslurm.broker.bootstrap SCRIPT|-m MODULE ARGS...``.

Installs the lease hooks from the ``ACBSLURM_AGARUN_*`` variables, then runs the
program as ``__main__`` with the ``sys.argv`` it would have had without agarun.
"""

from __future__ import annotations

import os
import runpy
import sys
from typing import Any

from acbslurm.broker.grpc_tuning import CLIENT_EXPERIMENTS, inline_io
from acbslurm.config import env_float, env_int
from acbslurm.errors import AcbslurmError

# Set by agarun: where its own grpc and protobuf live, and its Python's version.
SITE_ENV = "ACBSLURM_AGARUN_SITE"
PYVER_ENV = "ACBSLURM_AGARUN_PYVER"


def _broker_modules() -> tuple[object, object]:
    """BrokerClient and install; grpc from agarun's own environment when the program's
    Python (a user's conda env with torch) lacks it and is the same Python version."""
    try:
        from acbslurm.broker.client import BrokerClient
        from acbslurm.broker.runtime import install
    except ImportError as exc:
        same = os.environ.get(PYVER_ENV) == "{}.{}".format(*sys.version_info[:2])
        site = [p for p in os.environ.get(SITE_ENV, "").split(os.pathsep) if p]
        if not same or not site:
            _fail_import(exc)
        sys.path.extend(p for p in site if p not in sys.path)  # the program's own win
        try:
            from acbslurm.broker.client import BrokerClient
            from acbslurm.broker.runtime import install
        except ImportError as again:
            _fail_import(again)
    return BrokerClient, install


def _fail_import(exc: ImportError) -> None:
    sys.stderr.write(
        f"agarun: error: this program's Python ({sys.executable}, "
        f"{sys.version_info[0]}.{sys.version_info[1]}) cannot import {exc.name or exc}, "
        "which the broker's client needs: install it there "
        "(`pip install grpcio protobuf`), or run the program with the Python acbslurm "
        "is installed in\n"
    )
    raise SystemExit(3)


def main() -> None:
    inline_io(CLIENT_EXPERIMENTS)  # before grpc is imported
    client_class, install_hooks = _broker_modules()
    env = os.environ
    args = sys.argv[1:]
    while args[:1] in (["-u"], ["-B"], ["-O"]):  # interpreter flags before the script
        args = args[1:]
    try:
        _start(client_class, install_hooks, args, env)
    except AcbslurmError as exc:
        sys.stderr.write(f"agarun: error: {exc}\n")
        raise SystemExit(exc.exit_code) from None
    _run_program(args)


def _start(client_class: Any, install: Any, args: list[str], env: Any) -> None:
    # Every setting is read before the client connects: a bad one starts nothing.
    connect = env_float("ACBSLURM_AGARUN_TIMEOUT", 5.0, minimum=0.1, env=env)
    reconnect = env_float("ACBSLURM_AGARUN_RECONNECT", 30.0, env=env)
    memory = env_int("ACBSLURM_AGARUN_MEMORY", 0, env=env)
    idle = env_float("ACBSLURM_AGARUN_IDLE", 0.05, minimum=0.001, env=env)
    if args[:1] in (["-m"], ["-c"]) and len(args) > 1:
        name = args[1] if args[0] == "-m" else "python-c"
    else:
        name = os.path.basename(args[0])
    client = client_class(
        env["ACBSLURM_AGARUN_BROKER"],
        name=name,
        connect_timeout=connect,
        reconnect_timeout=reconnect,
    )
    install(
        client,
        env.get("ACBSLURM_AGARUN_DEVICE", "cuda"),
        memory=memory,
        idle=idle,
        stats_file=env.get("ACBSLURM_AGARUN_STATS", ""),
    )


def _run_program(args: list[str]) -> None:
    # The hooks are this thread's; the program must not see them in its namespace.
    if args[:1] == ["-c"] and len(args) > 1:  # python -c CODE [ARGS]: sys.argv[0] is -c
        sys.argv = ["-c", *args[2:]]
        code = compile(args[1], "<string>", "exec")
        exec(code, {"__name__": "__main__", "__builtins__": __builtins__})  # noqa: S102
    elif args[:1] == ["-m"]:
        sys.argv = [args[1], *args[2:]]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(args)
        sys.path.insert(0, os.path.dirname(os.path.abspath(args[0])))
        runpy.run_path(args[0], run_name="__main__")


if __name__ == "__main__":
    main()
