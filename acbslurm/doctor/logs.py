"""Where hook messages go: stderr (slurmd's log, with the exit code when a hook fails,
else only at debug levels) and syslog (facility daemon, tags acbslurm-prolog etc.)."""

from __future__ import annotations

import os
import stat

from acbslurm.doctor.result import Check, ok, warn

SYSLOG_SOCKET = "/dev/log"


def check_syslog(path: str = SYSLOG_SOCKET) -> Check:
    try:
        is_socket = stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        is_socket = False
    if is_socket:
        return ok(
            "syslog",
            f"hook messages go to syslog through {path} (`journalctl -t acbslurm-prolog`, "
            "or grep acbslurm- in the daemon log), and to slurmd's log on failure",
        )
    return warn(
        "syslog",
        f"no syslog socket at {path}: hook messages are only in slurmd's log (on a failure, "
        "or at SlurmdDebug=debug)",
        "run a syslog daemon (rsyslog, or systemd-journald's /dev/log)",
    )
