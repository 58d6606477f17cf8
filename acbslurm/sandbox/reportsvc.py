"""The sandbox's report service (`acbslurm report serve`), as a site runs it on its login
node: root reads the database option file, every user asks through the socket."""

from __future__ import annotations

from pathlib import Path

from acbslurm.jobsockets import socket_listening
from acbslurm.sandbox.layout import Layout, Params
from acbslurm.sandbox.procs import Proc, spawn, wait_for
from acbslurm.sandbox.slurm import slurm_env


def socket_path(layout: Layout) -> Path:
    return layout.run / "report.sock"


def ready(layout: Layout) -> bool:
    return socket_listening(str(socket_path(layout)), timeout=2)


def start(layout: Layout, params: Params, marker: str) -> Proc:
    env = {
        **slurm_env(layout),
        "ACBSLURM_CONFIG": str(layout.acbslurm_conf),
        "PYTHONPATH": params.pythonpath,
    }
    argv = [params.python, "-m", "acbslurm", "report", "serve"]
    argv += ["--socket", str(socket_path(layout))]
    log = layout.log_file("report")
    p = spawn("report", argv, run_dir=layout.run, log_file=log, marker=marker, env=env)
    wait_for("report service", lambda: ready(layout), proc=p, log_file=log, timeout=30)
    return p
