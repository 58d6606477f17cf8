"""The prolog's directories: job records (trusted by `acbslurm run` only when root's
alone) and the per-job runtime directories (a job's broker socket lives there)."""

from __future__ import annotations

import os
import stat

from acbslurm.doctor.context import Context
from acbslurm.doctor.result import Check, fail, ok


# complexity: one walk from the path up to /; the rules for a parent (root's, sticky, root's group)
# sit beside the loop that applies them, each a problem said in the doctor's words, which a helper
# per rule would separate.
def _dir_problems(path: str) -> tuple[bool, list[str]]:
    """(whether ``path`` exists, what lets others than root change it or its parents)."""
    problems: list[str] = []
    exists = os.path.lexists(path)
    if exists:
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode):
            return True, [f"{path} is not a directory"]
        if st.st_uid != 0 or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            problems.append(
                f"{path} must be root-owned and writable by root alone "
                f"(owner uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o})"
            )
    parent = os.path.dirname(os.path.abspath(path))
    while True:
        # Each parent up to /: owned by root, and no one else may write there (only a
        # sticky directory may be everyone's, a group-writable one root's group's).
        if os.path.exists(parent):
            st = os.stat(parent)
            mode = f"(mode {stat.S_IMODE(st.st_mode):04o})"
            if st.st_uid != 0:
                problems.append(f"{parent} is owned by uid {st.st_uid}, not root")
            elif st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX:
                problems.append(f"{parent} is writable by everyone {mode}")
            elif st.st_mode & stat.S_IWGRP and st.st_gid != 0:
                problems.append(f"{parent} is writable by group {st.st_gid} {mode}")
        up = os.path.dirname(parent)
        if up == parent:
            return exists, problems
        parent = up


def _check(name: str, path: str, setting: str, what: str) -> Check:
    if not os.path.isabs(path):
        return fail(name, f"{setting}={path!r} is not an absolute path", f"set {setting}")
    try:
        exists, problems = _dir_problems(path)
    except OSError as exc:
        return fail(name, f"{path}: {exc.strerror}", f"check {setting} and the mounts")
    if problems:
        return fail(
            name,
            "; ".join(problems) + f": {what} there are not trusted",
            f"as root: chown root:root and chmod 0755 {path} and its parents, or point "
            f"{setting} at a root-owned place (default under /run/acbslurm)",
        )
    state = "root's alone" if exists else "does not exist yet; the prolog creates it"
    return ok(name, f"{path}: {state}")


def check_record_dir(ctx: Context) -> Check:
    return _check("record-dir", ctx.settings.record_dir, "record_dir", "job records")


def check_job_runtime_dir(ctx: Context) -> Check:
    return _check(
        "job-runtime-dir",
        ctx.settings.job_runtime_dir,
        "job_runtime_dir",
        "per-job directories (broker sockets)",
    )
