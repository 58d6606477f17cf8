"""slurmdbd's own settings as ``sacctmgr show config`` prints them.

The report service shows a user what sacct would (docs/report.md): slurmdbd's
``PrivateData`` says whether jobs are private.
"""

from __future__ import annotations

import logging
import re

from acbslurm.errors import AcbslurmError
from acbslurm.slurm.commands import slurm
from acbslurm.slurm.versions import sacctmgr_shows_dbd_private_data

log = logging.getLogger(__name__)


def private_data_of_slurmdbd() -> str:
    """slurmdbd's ``PrivateData`` (``sacctmgr show config``); "jobs" when it cannot tell.

    Not knowing must not show anyone more than sacct would: assume jobs are private.
    """
    try:
        out = slurm(["sacctmgr", "-n", "show", "config"], timeout=15).stdout
    except AcbslurmError as exc:
        log.warning("cannot read slurmdbd's PrivateData (%s): treating jobs as private", exc)
        return "jobs"
    return parse_private_data(out)


def parse_private_data(show_config: str) -> str:
    """slurmdbd's PrivateData from ``sacctmgr show config``, whose first section is the
    local slurm.conf's (slurmctld's PrivateData, not what sacct obeys). "jobs" where the
    output cannot tell: no slurmdbd section, or a sacctmgr (26.05 on) whose slurmdbd
    section repeats the local slurm.conf's PrivateData."""
    local, sep, dbd = show_config.partition("SlurmDBD configuration")
    release = re.search(
        r"^\s*SLURM_VERSION\s*=\s*([0-9]+\.[0-9]+(?:\.[0-9]+)?)", local, re.MULTILINE
    )
    if release and not sacctmgr_shows_dbd_private_data(release.group(1)):
        log.warning(
            "sacctmgr %s does not show slurmdbd's PrivateData (Slurm 26.05 on): treating "
            "jobs as private; set report_private_data to slurmdbd.conf's PrivateData "
            "(none, jobs...) to say otherwise",
            release.group(1),
        )
        return "jobs"
    m = re.search(r"^\s*PrivateData\s*=\s*(\S*)", dbd if sep else "", re.MULTILINE)
    return m.group(1) if m else "jobs"
