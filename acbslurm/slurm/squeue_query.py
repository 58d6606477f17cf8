"""The squeue command line of a job query (``jobs.query_jobs``), apart from the code that
reads its answer: `acbslurm status` starts it before importing that code (no imports
here), and ``jobs`` parses what it prints.
"""

from __future__ import annotations

# On status' path before squeue starts: no typing at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

# squeue's fields (``-O``: each printed whole, then its separator), all a status needs in
# one request. The AdminComment carries the GPUs the job's prologs wrote (``gpu_history``),
# so a running job's GPUs come without an scontrol call or listing; the working
# directory is where a running job keeps its pool's address and published ports. Those
# two and the name may hold '|': they come last, the comment and the directory each
# ended by a unit separator (0x1f) and split at the first one, so neither a directory
# nor a name (a user's text) reaches the comment (an admin's). JobID is the job's own
# id (an array task's, the one its record is named by), JobArrayID squeue's (12_1).
SQUEUE_FIELDS = (
    "JobArrayID",
    "JobID",
    "State",
    "Reason",
    "TimeUsed",
    "NodeList",
    "UserName",
    "SubmitTime",
    "StartTime",
    "EndTime",
    "Partition",
)
SQUEUE_FORMAT = (
    ",".join(f"{name}:|" for name in SQUEUE_FIELDS) + ",admin_comment:\x1f,WorkDir:\x1f,Name:"
)


def squeue_argv(wanted: Sequence[str], user: str | None) -> list[str]:
    """squeue's command for the jobs ``wanted`` (all queued ones when none), of ``user``."""
    # -a: jobs of a hidden partition (Hidden=YES, which submit takes) are listed too.
    argv = ["squeue", "-a", "-h", "-O", SQUEUE_FORMAT]
    if wanted:
        # -t all: finished jobs the controller still remembers (MinJobAge) come back too.
        argv += ["-t", "all", "--jobs=" + ",".join(dict.fromkeys(wanted))]
    if user:
        argv += ["-u", user]
    return argv
