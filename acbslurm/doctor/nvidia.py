"""The NVIDIA container hook that gives a container its GPUs.

dockerd accepts ``--gpus`` (a device request with driver ``nvidia``) only when it finds
``nvidia-container-runtime-hook`` on its PATH when it starts; runc then runs the hook for
every container. A rootless daemon cannot write device cgroups, so the toolkit's
config.toml must say ``no-cgroups = true``. The sandbox's stand-in (it records what Docker
asked for and grants nothing) must never be on a node whose settings use NVML.
"""

from __future__ import annotations

import os
import tomllib

from acbslurm.dockerapi.engine import socket_path
from acbslurm.doctor.context import Context
from acbslurm.doctor.docker import docker_host, root_skip
from acbslurm.doctor.result import Check, fail, ok
from acbslurm.errors import AcbslurmError
from acbslurm.procfs import real_uid
from acbslurm.resources import conf_dir
from acbslurm.units import is_ascii_int

HOOK = "nvidia-container-runtime-hook"
STANDIN_MARK = "SANDBOX-ONLY"
TOOLKIT_CONFIG = "/etc/nvidia-container-runtime/config.toml"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
FIX_INSTALL = (
    "install nvidia-container-toolkit on the node (it provides nvidia-container-runtime-hook "
    "in /usr/bin), then restart the user's dockerd so that it finds the hook"
)


def _nul_list(path: str) -> list[str]:
    with open(path, "rb") as f:
        return [item.decode(errors="replace") for item in f.read().split(b"\0") if item]


def _socket_of(argv: list[str], env: dict[str, str]) -> str:
    """The unix socket a dockerd listens on: ``-H``/``--host``, else its default."""
    for i, arg in enumerate(argv):
        value = arg.split("=", 1)[1] if arg.startswith("--host=") else ""
        if arg in ("-H", "--host") and i + 1 < len(argv):
            value = argv[i + 1]
        if value.startswith("unix://"):
            return value[len("unix://") :]
    return os.path.join(env.get("XDG_RUNTIME_DIR", "/run/user/0"), "docker.sock")


def daemon_envs(uid: int, proc: str = "/proc") -> list[tuple[str, dict[str, str]]]:
    """(socket, environment) of the ``dockerd`` processes of ``uid`` that we may read."""
    out = []
    for pid in (p for p in os.listdir(proc) if is_ascii_int(p)):
        try:
            with open(os.path.join(proc, pid, "status"), "rb") as f:
                status = f.read()
            if not status.startswith(b"Name:\tdockerd\n") or real_uid(status) != uid:
                continue
            env = dict(item.partition("=")[::2] for item in _nul_list(f"{proc}/{pid}/environ"))
            argv = _nul_list(f"{proc}/{pid}/cmdline")
        except OSError:  # gone, or not ours to read
            continue
        out.append((_socket_of(argv, env), env))
    return out


def find_hook(path: str) -> str:
    for d in path.split(":"):
        candidate = os.path.join(d, HOOK)
        if d and os.access(candidate, os.X_OK):
            return candidate
    return ""


def _hook_search(ctx: Context, proc: str, config: str) -> tuple[str, str, str]:
    """Where the hook is looked for (said in words), that PATH, and the toolkit config
    that counts: the running dockerd's (its own config if it has one), else the
    standard PATH and ``config``.

    The daemon is the one `acbslurm run` would use, found by its socket (this node's
    docker_host for the user). Only that one: another daemon of the same user (a second
    sandbox's) may have another PATH, and saying ok about it while this node's daemon
    is down was wrong."""
    try:
        want = socket_path(docker_host(ctx))
    except (AcbslurmError, KeyError, IndexError, ValueError):
        want = ""
    envs = daemon_envs(ctx.uid, proc) if want else []
    real = os.path.realpath(want)
    env = next((e for sock, e in envs if os.path.realpath(sock) == real), None)
    if env is not None:
        where = f"the PATH of {ctx.user}'s running dockerd"
        path = env.get("PATH", "")
        xdg = env.get("XDG_CONFIG_HOME")
        user_config = os.path.join(xdg, "nvidia-container-runtime", "config.toml") if xdg else ""
        config = user_config if user_config and os.path.exists(user_config) else config
    else:
        at = f" at {want}" if want else ""
        where = f"the standard PATH (no running dockerd of {ctx.user}{at} found)"
        path = ":".join(filter(None, [ctx.env.get("PATH", ""), DEFAULT_PATH]))
    return where, path, config


# complexity: a doctor check ends at its first outcome, and the returns are the outcomes in the
# order an admin fixes them (the hook, the sandbox's stand-in, the toolkit's config); split, each
# helper would return an outcome or None and the caller would test each.
def check_nvidia_hook(ctx: Context, proc: str = "/proc", config: str = TOOLKIT_CONFIG) -> Check:
    skipped = root_skip(ctx, "nvidia-hook")  # as `dockerd`: no daemon of root's to look at
    if skipped is not None:
        return skipped
    where, path, config = _hook_search(ctx, proc, config)
    hook = find_hook(path)
    if not hook:
        return fail("nvidia-hook", f"{HOOK} is not on {where}: `--gpus` cannot work", FIX_INSTALL)
    try:
        with open(hook, "rb") as f:
            standin = STANDIN_MARK.encode() in f.read(4096)
    except OSError:
        standin = False
    if standin:
        if not ctx.settings.gpu_inventory:
            return fail(
                "nvidia-hook",
                f"{hook} is the sandbox's stand-in (it grants no GPU), on a node whose "
                "settings use NVML (gpu_inventory is empty)",
                "remove it from the daemon's PATH and " + FIX_INSTALL,
            )
        return ok("nvidia-hook", f"{hook} on {where}: the sandbox's stand-in (grants nothing)")
    problem = ""
    try:
        with open(config, "rb") as f:
            cli = tomllib.load(f).get("nvidia-container-cli")
        if not isinstance(cli, dict) or cli.get("no-cgroups") is not True:
            problem = f"{config} does not set no-cgroups = true under [nvidia-container-cli]"
    except FileNotFoundError:
        problem = f"{config} does not exist (the toolkit would try to write device cgroups)"
    except (OSError, tomllib.TOMLDecodeError) as exc:
        problem = f"{config} cannot be read: {exc}"
    if problem:
        return fail(
            "nvidia-hook",
            f"{hook} is installed but {problem}",
            f"set [nvidia-container-cli] no-cgroups = true in {config} "
            f"({conf_dir() / 'nvidia-container-toolkit' / 'config.toml'})",
        )
    return ok("nvidia-hook", f"{hook} on {where}; {config}: no-cgroups = true")
