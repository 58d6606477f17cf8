"""The user's rootless dockerd: does it answer, is it rootless, will it outlive logins."""

from __future__ import annotations

import os

from acbslurm.cgroups.runtime import CREATE_LINE, EXEC_LINE
from acbslurm.dockerapi.engine import EngineApi
from acbslurm.dockerapi.hosts import find_docker_host, user_docker_host
from acbslurm.dockerapi.netns import shares_node_network
from acbslurm.doctor.context import Context
from acbslurm.doctor.result import Check, fail, ok, skip, warn
from acbslurm.errors import DockerError

FIX_ROOTLESS = (
    "as the user: `dockerd-rootless-setuptool.sh install` then `systemctl --user enable "
    "--now docker` (needs /etc/subuid and /etc/subgid ranges, and as root `loginctl "
    "enable-linger USER`); see docs/admin-guide.md, 'Rootless Docker per user'"
)


def docker_host(ctx: Context) -> str:
    """The daemon `acbslurm run` would use: the caller's environment, or the site's."""
    if ctx.for_caller:
        return find_docker_host(ctx.env, ctx.settings, ctx.uid, ctx.user)
    return user_docker_host(ctx.settings, ctx.uid, ctx.user)


def check_dockerd(ctx: Context) -> Check:
    skipped = root_skip(ctx, "dockerd")
    if skipped is not None:
        return skipped
    try:
        host = docker_host(ctx)
        info = EngineApi(host, timeout=min(ctx.settings.hook_docker_timeout, 5.0)).info()
    except (DockerError, KeyError, IndexError, ValueError) as exc:
        return fail("dockerd", f"{ctx.user}: {exc}", start_hint_for(ctx) + "; " + FIX_ROOTLESS)
    version = info.get("ServerVersion", "?")
    opts = info.get("SecurityOptions") or []
    if not (isinstance(opts, list) and any("name=rootless" in str(o) for o in opts)):
        return fail(
            "dockerd",
            f"the daemon at {host} (Docker {version}) is not rootless: containers would run "
            "as root",
            "point DOCKER_HOST/docker_host at the user's own rootless daemon; " + FIX_ROOTLESS,
        )
    note = ""
    if info.get("CgroupDriver") == "none":
        note = " (cgroup driver none: CPU/memory limits are not enforced)"
    return ok("dockerd", f"{ctx.user}'s rootless Docker {version} answers at {host}{note}")


NODE_NETWORK_FIX = (
    "run the users' daemons with rootlesskit's --detach-netns where their Docker supports "
    "it, or run jobs on several nodes where the daemon has the node's network; see "
    "docs/multi-node.md, 'The network the containers need'"
)


def check_node_network(ctx: Context) -> Check:
    """Whether the daemon's host network is this node's: what the containers of a job on
    several nodes need to reach each other (`acbslurm run` gives them the host network
    there by default)."""
    skipped = root_skip(ctx, "node-network")
    if skipped is not None:
        return skipped
    host = docker_host(ctx)
    shares = shares_node_network(host)
    if shares is None:
        return skip(
            "node-network",
            f"cannot tell which network namespace the daemon at {host} is in (no daemon "
            "answers, or its process is not readable)",
        )
    if shares:
        return ok(
            "node-network",
            f"the daemon at {host} is in this node's network namespace: a job's containers "
            "on several nodes reach each other by the nodes' names and addresses",
        )
    return warn(
        "node-network",
        f"the daemon at {host} runs in a network namespace of its own (rootlesskit without "
        "--detach-netns): the containers of a job on several nodes cannot reach each "
        "other; jobs on one node are not affected",
        NODE_NETWORK_FIX,
    )


def start_hint_for(ctx: Context) -> str:
    """How to start the checked user's daemon, naming that user and uid: root checking
    ``--user user1`` must read user1's uid, not its own (dockerapi's hint is the caller's)."""
    try:
        host = docker_host(ctx)
    except (KeyError, IndexError, ValueError):
        return f"fix the docker_host setting {ctx.settings.docker_host!r}"
    return (
        f"no Docker daemon is running at {host} for {ctx.user} (uid {ctx.uid}); as "
        f"{ctx.user}, start the rootless daemon with `dockerd-rootless.sh` (or `systemctl "
        "--user start docker`), or point DOCKER_HOST at it"
    )


ROOT_HAS_NO_DAEMON = "root has no rootless daemon: run as a job user, or `--user NAME` as root"


def root_skip(ctx: Context, name: str) -> Check | None:
    """A skip when the checked user is root: acbslurm runs containers in the job user's
    rootless daemon only, so root's daemon (or none) says nothing about a job."""
    return skip(name, ROOT_HAS_NO_DAEMON) if ctx.uid == 0 else None


def check_linger(
    ctx: Context, systemd: str = "/run/systemd/system", lingering: str = "/var/lib/systemd/linger"
) -> Check:
    if ctx.uid == 0:
        return skip("linger", "root: give `--user NAME` to check a job user")
    if not os.path.isdir(systemd):
        return skip("linger", "systemd does not run here: start the user's daemon another way")
    if os.path.exists(os.path.join(lingering, ctx.user)):
        return ok("linger", f"{ctx.user} lingers: the user's daemon outlives their logins")
    return warn(
        "linger",
        f"{ctx.user} does not linger: systemd stops their dockerd when they log out, and "
        "their jobs' `acbslurm run` finds no daemon",
        f"as root: loginctl enable-linger {ctx.user}",
    )


FIX_RUNTIME = (
    "as root `acbslurm install-runtime /usr/local/libexec/acbslurm-runc`, then in the "
    "user's ~/.config/docker/daemon.json "
    '"runtimes": {"acbslurm": {"path": "/usr/local/libexec/acbslurm-runc"}} and restart '
    "the daemon (docs/admin-guide.md, 'Containers in the job's cgroups')"
)


def slurm_cgroup_plugins(proctrack: str | None, task_plugin: str) -> str:
    """Slurm's cgroup plugins slurm.conf names (``ProctrackType=proctrack/cgroup``,
    ``TaskPlugin=...task/cgroup...``), as slurm.conf's lines; "" for none."""
    found = []
    if proctrack == "proctrack/cgroup":
        found.append(f"ProctrackType={proctrack}")
    if "task/cgroup" in [p.strip() for p in task_plugin.split(",")]:
        found.append(f"TaskPlugin={task_plugin}")
    return ", ".join(found)


def check_container_cgroups(ctx: Context, proctrack: str | None, task_plugin: str = "") -> Check:
    """`container_cgroups: join` needs Slurm's cgroups (the job's, to join) and, in the
    user's daemon, acbslurm's runtime (which asks the job's helper at create).

    Not joining where Slurm runs its cgroup plugins fails: the site has the limits, and
    every job's native processes are held by them while its containers, without join,
    are not (no memory or CPU limit, no accounting), which nothing else would show.
    ``proctrack`` is None when slurm.conf could not be read."""
    name = "container-cgroups"
    mode = ctx.settings.container_cgroups
    if mode not in ("join", "off"):
        return fail(
            name,
            f"container_cgroups: {mode!r} is neither join nor off: a job's containers run "
            "beside the job, outside its cgroups",
            "set container_cgroups: join (or off where Slurm runs no cgroup plugins)",
        )
    if mode != "join":
        beside = (
            "container_cgroups: off: a job's containers run beside the job, outside its "
            "cgroups (Slurm's memory and CPU limits, device rules and accounting do not "
            "hold them)"
        )
        plugins = slurm_cgroup_plugins(proctrack, task_plugin)
        if plugins:
            return fail(
                name,
                f"{beside}, though this node runs Slurm's cgroup plugins ({plugins})",
                "set container_cgroups: join in the settings file and " + FIX_RUNTIME,
            )
        return warn(
            name,
            beside,
            "with Slurm's cgroup plugins, set container_cgroups: join and " + FIX_RUNTIME,
        )
    if proctrack is not None and proctrack != "proctrack/cgroup":
        return fail(
            name,
            f"container_cgroups: join, but ProctrackType={proctrack or '(not set)'}: jobs "
            "have no cgroups to join, and every container start would fail",
            "set ProctrackType=proctrack/cgroup and TaskPlugin=task/cgroup,task/affinity "
            "(docs/admin-guide.md, 'Containers in the job's cgroups'); or, on a site that "
            "will not run Slurm's cgroup plugins, container_cgroups: off (its containers "
            "then run outside every job's limits)",
        )
    return root_skip(ctx, name) or _runtime_in_daemon(ctx, name)


def _runtime_in_daemon(ctx: Context, name: str) -> Check:
    """The user's daemon has acbslurm's runtime, and this release's."""
    try:
        info = EngineApi(docker_host(ctx), timeout=5.0).info()
    except (DockerError, KeyError, IndexError, ValueError) as exc:
        return skip(name, f"{ctx.user}'s daemon does not answer ({exc})")
    runtimes = sorted((info.get("Runtimes") or {}).keys())
    if "acbslurm" not in runtimes:
        return fail(
            name,
            f"{ctx.user}'s daemon has no 'acbslurm' runtime ({', '.join(runtimes)}): "
            "`acbslurm run` refuses to start containers in jobs",
            FIX_RUNTIME,
        )
    stale = stale_runtime(str(((info.get("Runtimes") or {}).get("acbslurm") or {}).get("path")))
    if stale:
        return warn(name, stale, FIX_RUNTIME)
    return ok(
        name, f"jobs' containers join their step's cgroups ({ctx.user}'s daemon has the runtime)"
    )


def stale_runtime(path: str) -> str:
    """Why the daemon's acbslurm runtime at ``path`` is not this release's script, or
    "": the join of a `docker exec` and of a create are in the script's lines."""
    try:
        with open(path, errors="replace") as f:
            text = f.read(65536)
    except OSError:
        return ""  # not readable from here: the daemon's own listing is all there is
    if "acbslurm.cgroups.runtime" not in text or (EXEC_LINE in text and CREATE_LINE in text):
        return ""
    return (
        f"the runtime {path} is another acbslurm release's script: a `docker exec` into a "
        "job's container may run outside the job's cgroups"
    )
