"""Which Slurm clients to run: the site's, not whatever ``scontrol`` comes first on PATH.

slurmd gives its Prolog and Epilog no PATH, and a node may hold two Slurm installations
(a packaged one and the one the site built); a client of another release cannot talk to
the daemons ("Incompatible versions of client and server code"). The bin directory is,
in order:

1. the ``slurm_bin_dir`` setting (``ACBSLURM_SLURM_BIN_DIR``);
2. the ``bin`` beside the slurmd (or slurmstepd) that runs this hook: the Slurm the node
   really runs;
3. the ``bin`` of the installation holding slurm.conf's ``PluginDir``;
4. none: PATH (a site with one Slurm in /usr/bin).

On the hook path: os only (no pathlib, typing; tests/unit/hooks/test_hooks_imports.py).
"""

from __future__ import annotations

import os

BIN_DIR_ENV = "ACBSLURM_SLURM_BIN_DIR"
_DAEMONS = ("slurmd", "slurmstepd")


def _has_scontrol(d: str) -> bool:
    return os.access(os.path.join(d, "scontrol"), os.X_OK)


def beside_daemon(pid: int) -> str:
    """``PREFIX/bin`` when ``pid`` runs ``PREFIX/sbin/slurmd``; "" otherwise."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""
    exe = exe.removesuffix(" (deleted)")  # an upgraded install still names its path
    if os.path.basename(exe) not in _DAEMONS:
        return ""
    candidate = os.path.join(os.path.dirname(os.path.dirname(exe)), "bin")
    return candidate if _has_scontrol(candidate) else ""


def plugin_dir(slurm_conf: str) -> str:
    """slurm.conf's ``PluginDir`` (the first of a colon list); "" when not set."""
    try:
        with open(slurm_conf) as f:
            for line in f:
                key, sep, value = line.split("#", 1)[0].strip().partition("=")
                if sep and key.strip().lower() == "plugindir":
                    return value.strip().split(":")[0]
    except OSError:
        return ""
    return ""


def beside_plugin_dir(slurm_conf: str) -> str:
    """The ``bin`` of the installation that holds ``PluginDir`` (searched upwards:
    Debian's /usr/lib/x86_64-linux-gnu/slurm-wlm belongs to /usr/bin)."""
    d = plugin_dir(slurm_conf)
    while d and d != "/":
        d = os.path.dirname(d)
        if _has_scontrol(os.path.join(d, "bin")):
            return os.path.join(d, "bin")
    return ""


def slurm_bin_dir(configured: str, slurm_conf: str, parent_pid: int | None = None) -> str:
    """The bin directory of the site's Slurm clients ("" = take them from PATH)."""
    if configured:
        return configured
    found = beside_daemon(os.getppid() if parent_pid is None else parent_pid)
    return found or beside_plugin_dir(slurm_conf)


def client(name: str, bin_dir: str) -> str:
    """The path to run for the Slurm client ``name``."""
    if not bin_dir or "/" in name:
        return name
    return os.path.join(bin_dir, name)
