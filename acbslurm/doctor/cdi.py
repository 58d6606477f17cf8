"""The CDI spec the user's daemon reads, where it has CDI (Docker 26.1 with the feature,
28.2 on): it exists, the daemon's user can read it, and it names every GPU of the node.

`acbslurm run` asks such a daemon for ``nvidia.com/gpu=<UUID>`` devices; a GPU the spec
does not name fails the job's container at create time ("unresolvable CDI devices").
"""

from __future__ import annotations

import os
import pwd
import stat

from acbslurm.dockerapi import cdi
from acbslurm.dockerapi.engine import EngineApi
from acbslurm.doctor.context import Context
from acbslurm.doctor.docker import docker_host
from acbslurm.doctor.result import Check, fail, ok, skip
from acbslurm.errors import AcbslurmError, DockerError
from acbslurm.gpu.node import node_inventory

NAME = "cdi-spec"
FIX_GENERATE = (
    "as root: `nvidia-ctk cdi generate --output=DIR/nvidia.yaml` (NVIDIA Container Toolkit "
    "1.18+) into a directory the user's daemon reads, and name it in the user's "
    '~/.config/docker/daemon.json: `"cdi-spec-dirs": ["DIR"]`, then restart their dockerd; '
    "see docs/admin-guide.md, 'CDI'"
)


def _may(st: os.stat_result, uid: int, gids: set[int], bits: tuple[int, int, int]) -> bool:
    """Whether ``uid`` (in ``gids``) has the permission ``bits`` (user, group, other)."""
    if uid == 0:
        return True
    if st.st_uid == uid:
        return bool(st.st_mode & bits[0])
    if st.st_gid in gids:
        return bool(st.st_mode & bits[1])
    return bool(st.st_mode & bits[2])


def readable_by(path: str, uid: int) -> bool:
    """``uid`` can read ``path``: the file readable, every directory above searchable
    (the doctor may run as root for the user: os.access would ask for root)."""
    try:
        pw = pwd.getpwuid(uid)
        gids = set(os.getgrouplist(pw.pw_name, pw.pw_gid))
    except KeyError:
        gids = set()
    read = (stat.S_IRUSR, stat.S_IRGRP, stat.S_IROTH)
    search = (stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH)
    real = os.path.realpath(path)
    parts = real.split("/")[1:-1]
    for i in range(len(parts) + 1):
        d = "/" + "/".join(parts[:i])
        if not _may(os.stat(d), uid, gids, search):
            return False
    return _may(os.stat(real), uid, gids, read)


def check_cdi(ctx: Context) -> Check:
    if ctx.uid == 0:
        return skip(NAME, "root has no rootless daemon: give `--user NAME`")
    try:
        host = docker_host(ctx)
        info = EngineApi(host, timeout=min(ctx.settings.hook_docker_timeout, 5.0)).info()
    except (DockerError, KeyError, IndexError, ValueError):
        return skip(NAME, "the user's daemon does not answer (see dockerd)")
    dirs = cdi.spec_dirs(info)
    version = info.get("ServerVersion", "?")
    if not dirs:
        return skip(NAME, f"Docker {version} has no CDI: `acbslurm run` uses --gpus")
    return check_specs(ctx, dirs, f"Docker {version}")


def check_specs(ctx: Context, dirs: list[str], daemon: str) -> Check:
    """The nvidia.com/gpu specs in ``dirs`` against the node's inventory."""
    where = ", ".join(dirs)
    try:
        specs = cdi.load_specs(dirs)
    except (AcbslurmError, OSError) as exc:
        return fail(NAME, f"a CDI spec in {where} cannot be read: {exc}", FIX_GENERATE)
    if not specs:
        return fail(
            NAME, f"no {cdi.GPU_KIND} spec in {daemon}'s cdi-spec-dirs {where}", FIX_GENERATE
        )
    unreadable = [s.path for s in specs if not readable_by(s.path, ctx.uid)]
    if unreadable:
        return fail(
            NAME,
            f"{ctx.user}'s daemon (uid {ctx.uid}) cannot read {', '.join(unreadable)}",
            "make the spec and its directories readable by the user (chmod a+r FILE, "
            "a+x on the directories), or generate it into a directory of theirs",
        )
    return _check_names(ctx, specs, daemon)


def _check_names(ctx: Context, specs: list[cdi.Spec], daemon: str) -> Check:
    try:
        gpus = node_inventory(ctx.settings)
    except AcbslurmError as exc:
        # The gres check fails on this already, with its fix: not a second failure.
        return skip(NAME, f"cannot list the node's GPUs to compare with {daemon}'s spec: {exc}")
    names = {n for s in specs for n in s.names}
    missing = [g for g in gpus if g.uuid not in names and str(g.index) not in names]
    files = ", ".join(s.path for s in specs)
    if missing:
        shown = ", ".join(f"{g.index} {g.uuid}" for g in missing)
        return fail(
            NAME,
            f"{files} does not name GPU(s) {shown} of the node's inventory: their jobs' "
            "containers would fail to create",
            "regenerate it after a GPU change: " + FIX_GENERATE,
        )
    return ok(NAME, f"{files} names all {len(gpus)} GPU(s) of the node; {daemon} reads it")
