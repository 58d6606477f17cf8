"""gres.conf against the node's GPUs (NVML or the static inventory): count, minors, UUIDs.

The check follows the prolog's own path: gres.conf's device files for this node (or, with
``AutoDetect=nvml``, the inventory's), each file's minor number, the inventory's GPU with
that minor, its UUID; and slurm.conf's ``Gres=gpu:N`` for the node.
"""

from __future__ import annotations

import re
import socket
from typing import TypeVar

from acbslurm.doctor.context import Context
from acbslurm.doctor.result import Check, fail, ok, warn
from acbslurm.doctor.slurmconf import SlurmConf
from acbslurm.errors import AcbslurmError
from acbslurm.gpu.gres_conf import gpu_gres, node_gpu_devices
from acbslurm.gpu.inventory import GpuInfo
from acbslurm.gpu.mapping import device_minor
from acbslurm.gpu.node import node_inventory

_V = TypeVar("_V", str, int)
_GPU_UUID = re.compile(r"^GPU-[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$")
FIX_GRES = (
    "list the node's GPUs in gres.conf as `NodeName=<node> Name=gpu File=/dev/nvidia[0-N]` "
    "(or `AutoDetect=nvml` alone), matching the GPUs NVML reports, then restart slurmd"
)


# complexity: independent problems collected, not chained: each `if` adds its own sentence, so a
# helper per problem would be a one-use function for a two-line rule.
def _problems(
    ctx: Context, conf: SlurmConf | None, devices: list[str], gpus: list[GpuInfo]
) -> list[str]:
    """What is wrong with the node's inventory, and with the GPU counts of slurm.conf's
    ``Gres=gpu:N``, gres.conf's device files and the node."""
    problems = []
    whole = [g for g in gpus if g.uuid.startswith("GPU-")]
    bad = [g.uuid for g in whole if not _GPU_UUID.match(g.uuid)]
    if bad:
        problems.append(f"malformed UUIDs {', '.join(bad)}")
    dups = _twice([g.uuid for g in gpus])
    if dups:
        problems.append(f"UUIDs listed twice: {', '.join(dups)}")
    dup_minors = _twice([g.minor for g in whole])
    if dup_minors:
        problems.append(f"minor numbers of two GPUs: {dup_minors}")
    declared = conf.node_gpu_count(ctx.node) if conf else None
    if declared is not None and declared != len(devices):
        problems.append(
            f"slurm.conf gives node {ctx.node} Gres=gpu:{declared} but gres.conf has "
            f"{len(devices)} GPU device file(s)"
        )
    if len(devices) > len(whole):
        problems.append(f"gres.conf has {len(devices)} GPUs, the node {len(whole)}")
    return problems


def _twice(values: list[_V]) -> list[_V]:
    """The values listed more than once, sorted."""
    return sorted({v for v in values if values.count(v) > 1})


def _mapping(devices: list[str], gpus: list[GpuInfo]) -> tuple[list[str], list[str]]:
    """``index -> file (minor) -> UUID`` lines, and what does not map."""
    by_minor = {g.minor: g for g in gpus if g.uuid.startswith("GPU-")}
    lines, problems = [], []
    for i, path in enumerate(devices):
        try:
            minor = device_minor(path)
        except AcbslurmError as exc:
            problems.append(str(exc))
            continue
        gpu = by_minor.get(minor)
        if gpu is None:
            problems.append(f"index {i} -> {path} (minor {minor}): no GPU with that minor")
        else:
            lines.append(f"{i} -> {path} (minor {minor}) -> {gpu.uuid}")
    if len(set(devices)) != len(devices):
        problems.append("a device file is listed twice")
    return lines, problems


# complexity: a doctor check ends at its first outcome, in the order an admin must fix them (the
# node's name first, or the rest would blame gres.conf wrongly); split, each helper would return an
# outcome or None and the caller would test each.
def check_gres(ctx: Context, conf: SlurmConf | None) -> Check:
    # ctx.node must be a node of slurm.conf (configless: no NodeName lines here). Checked
    # first: with several slurmd on this host (the sandbox's ``--nodes``), the host name
    # is none of them and gres.conf has no line for it, which said "fix gres.conf" wrongly.
    names = conf.node_names() if conf else []
    if conf and names and ctx.node not in names:
        host = socket.gethostname()
        local = conf.local_nodes({host, host.split(".")[0], socket.getfqdn()})
        unknown = f"slurm.conf has no node {ctx.node} (it has {', '.join(names)})"
        if len(local) > 1:
            unknown = (
                f"several nodes share this host ({', '.join(local)}) and slurm.conf has no "
                f"node {ctx.node}: the doctor checks one node at a time"
            )
        return fail("gres", unknown, "pass Slurm's name for this node: `--node NAME`")
    s = ctx.settings
    source = f"the static inventory {s.gpu_inventory}" if s.gpu_inventory else "NVML"
    try:
        gpus = node_inventory(s)
        devices = node_gpu_devices(s.gres_conf, ctx.node, gpus)
        files, mode = gpu_gres(s.gres_conf, ctx.node)
    except AcbslurmError as exc:
        fix = FIX_GRES
        if not s.gpu_inventory:
            fix = "install the NVIDIA driver and nvidia-ml-py, or " + fix
        return fail("gres", f"{exc}", fix)
    lines, unmapped = _mapping(devices, gpus)
    problems = _problems(ctx, conf, devices, gpus) + unmapped
    how = "AutoDetect=nvml" if mode == "nvml" and not files else "File="
    if problems:
        return fail("gres", f"{s.gres_conf} ({how}) vs {source}: " + "; ".join(problems), FIX_GRES)
    if len(devices) < sum(g.uuid.startswith("GPU-") for g in gpus):  # whole GPUs, not MIG
        return warn(
            "gres",
            f"{s.gres_conf} lists {len(devices)} of the node's GPUs; Slurm never hands out the "
            f"others: " + "; ".join(lines),
        )
    return ok("gres", f"{s.gres_conf} ({how}) vs {source}, node {ctx.node}: " + "; ".join(lines))
