"""The Slurm version of this node's commands (and of its slurmd, when it is here)."""

from __future__ import annotations

import os
import shutil

from acbslurm.doctor.context import Context
from acbslurm.doctor.result import Check, fail, ok, warn
from acbslurm.errors import AcbslurmError
from acbslurm.slurm.backend import version_text
from acbslurm.slurm.versions import parse_release

TESTED = (22, 5)
# where slurmd lives when sbin is not on PATH
SBIN = "/usr/sbin:/usr/local/sbin"


def _version(text: str) -> tuple[int, int] | None:
    """``slurm 22.05.8`` -> (22, 5); None when it names no release."""
    try:
        return parse_release(text)[:2]
    except ValueError:
        return None


def client_env(ctx: Context) -> dict[str, str]:
    """The environment for Slurm's clients: SLURM_CONF, else the slurm_conf setting.

    Slurm's clients read slurm.conf even for ``--version``; without a file they try
    configless DNS SRV records and fail. ``sudo`` drops SLURM_CONF, so a doctor run as
    root on a node whose slurm.conf is not /etc/slurm/slurm.conf needs the setting.
    """
    env = dict(ctx.env)
    if not env.get("SLURM_CONF") and os.path.isfile(ctx.settings.slurm_conf):
        env["SLURM_CONF"] = ctx.settings.slurm_conf
    return env


def check_slurm_version(ctx: Context) -> Check:
    env = client_env(ctx)
    try:
        text = version_text("scontrol", env)
    except AcbslurmError as exc:
        return fail(
            "slurm-version",
            f"`scontrol --version` failed: {exc}",
            "run the doctor on a Slurm node with Slurm's commands on PATH, and SLURM_CONF "
            "or the slurm_conf setting naming its slurm.conf (configless: slurmd's cache)",
        )
    version = _version(text)
    if version is None:
        return warn("slurm-version", f"cannot read a version in {text!r}")
    slurmd_bin = shutil.which("slurmd", path=env.get("PATH", "") + ":" + SBIN)
    try:
        slurmd = version_text(slurmd_bin, env, flag="-V") if slurmd_bin else ""
    except AcbslurmError:
        slurmd = ""  # a slurmd that cannot say its version: scontrol's is compared alone
    if slurmd and slurmd.split()[-1] != text.split()[-1]:
        return warn(
            "slurm-version",
            f"scontrol is {text} but slurmd is {slurmd}",
            "install one Slurm version on the node (client and daemon)",
        )
    if version < TESTED:
        return warn(
            "slurm-version",
            f"{text}: acbslurm is tested with Slurm {TESTED[0]}.{TESTED[1]:02d} and later",
            "upgrade Slurm, or check the prolog's environment (SLURM_JOB_GPUS) by hand",
        )
    return ok("slurm-version", text + (f" (slurmd {slurmd.split()[-1]})" if slurmd else ""))
