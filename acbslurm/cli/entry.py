"""The ``acbslurm`` console entry: `acbslurm run` first tries its click-free parser.

It sits on every container job's path (docs/benchmarks.md). Every other command, and
every `run` line the fast parser does not fully accept, goes to the click application
in ``cli/main.py``.
"""

from __future__ import annotations

import gc
import os
import sys


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["run"]:
        # The collector's passes over what the imports create would lengthen the
        # container's start (docs/benchmarks.md, "Where the client's time went"):
        # off until the container runs (launch.run_container turns it on again).
        gc.disable()
        from acbslurm.container.probe import probe_from_env

        early = probe_from_env(os.environ)  # /info while the rest is imported
        from acbslurm.cli.run_fast import try_run

        code = try_run(args[1:], early)
        if code is not None:
            sys.exit(code)
        gc.enable()
    from acbslurm.cli.main import main as click_main

    click_main(args)
