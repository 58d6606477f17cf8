"""Which way `acbslurm submit` and `cancel` reach Slurm: its commands or pyslurm.

``slurm_backend`` is ``cli`` (sbatch, scancel: every release, any user), ``pyslurm``
(libslurm in-process: no fork and exec per job; an error when it cannot be used) or
``auto`` (pyslurm when it is usable, else the CLI). pyslurm is usable when:

1. a slurm.conf is readable (``SLURM_CONF``, else the ``slurm_conf`` setting): without
   one ``import pyslurm`` does not raise, libslurm kills the interpreter (a fatal);
2. it is installed (found without importing it);
3. it was built for the running Slurm's release: pyslurm's version is the Slurm release
   it wraps (25.11.x for 25.11), and a libslurm of another release refuses to talk to
   the daemons. The running release is ``scontrol --version`` of the site's clients.

With pyslurm, ``status``, the ``--wait`` watcher and ``cancel`` ask the controller
in-process too (one RPC a poll, GPUs included); jobs the controller has forgotten
come from sacct with either backend.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from acbslurm.errors import ConfigError, SlurmError
from acbslurm.slurm.commands import slurm

BACKENDS = ("auto", "cli", "pyslurm")


def version_text(
    program: str = "scontrol", env: Mapping[str, str] | None = None, *, flag: str = "--version"
) -> str:
    """What a Slurm program says its version is: ``slurm 25.11.7`` (``scontrol
    --version``, ``slurmd -V``); ``versions.parse_release`` reads it."""
    return slurm([program, flag], env=env, timeout=10).stdout.strip()


def running_release(env: Mapping[str, str] | None = None) -> str:
    """``25.11.7``: the release of the Slurm clients this process runs."""
    out = version_text("scontrol", env)
    return out.split()[-1] if out else ""


def pyslurm_version() -> str:
    """The installed pyslurm's version ("" when none is installed), without importing it."""
    import importlib.util

    if importlib.util.find_spec("pyslurm") is None:
        return ""
    # Only now: importlib.metadata (with email.*) would be the largest import of every
    # `acbslurm status` where slurm_backend is auto and no pyslurm is installed
    # (docs/benchmarks.md, "`acbslurm status` on a long queue").
    import importlib.metadata

    try:
        return importlib.metadata.version("pyslurm")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def pyslurm_problem(slurm_conf: str, env: Mapping[str, str] | None = None) -> str:
    """Why pyslurm cannot be used here ("" when it can)."""
    environ = os.environ if env is None else env
    conf = environ.get("SLURM_CONF") or slurm_conf
    if not os.access(conf, os.R_OK):
        return f"no readable slurm.conf at {conf} (import pyslurm would end the process)"
    have = pyslurm_version()
    if not have:
        return "pyslurm is not installed (pip install 'acbslurm[pyslurm]', docs/admin-guide.md)"
    try:
        running = running_release(env)
    except SlurmError as exc:
        return f"the running Slurm's release is unknown: {exc.reason or exc}"
    from acbslurm.slurm.versions import major  # here: `acbslurm status` needs none of it

    try:
        same = major(have) == major(running)
    except ValueError:
        same = False
    if not same:
        return f"pyslurm {have} is not built for the running Slurm {running}"
    return ""


def choose_backend(setting: str, slurm_conf: str, env: Mapping[str, str] | None = None) -> str:
    """``cli`` or ``pyslurm`` for ``setting`` (auto | cli | pyslurm)."""
    if setting not in BACKENDS:
        raise ConfigError(f"slurm_backend must be one of {', '.join(BACKENDS)}, got {setting!r}")
    if setting == "cli":
        return "cli"
    problem = pyslurm_problem(slurm_conf, env)
    if problem and setting == "pyslurm":
        raise ConfigError(f"slurm_backend is pyslurm, but {problem}")
    return "cli" if problem else "pyslurm"
