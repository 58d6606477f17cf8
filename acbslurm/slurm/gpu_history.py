"""Which GPUs (UUIDs) a job used, kept by Slurm itself after the job is gone.

slurmdbd 22.05 stores a job's GPU *count* only, and the prolog's job record is deleted by
the epilog, so "which GPU did job 42 use" had no answer once job 42 ended. The prolog
therefore writes the exact devices into the job's ``AdminComment``: a field only an
admin (the prolog runs as root) may set, which slurmctld hands to slurmdbd with the job
and the report reads back from the ``admin_comment`` column. The comment an admin gave
the job is kept; acbslurm adds one token, ``acbslurm:gpus=NODE:INDEX=UUID,...``.

A job on several nodes has one token per node, and their prologs run at once: each
does a read-modify-write of the whole comment (Slurm has no append), so one node's
update can start from a comment without another's token and drop it. On such a job a
prolog therefore writes only while its token is missing from what it read, and reads
the comment back after random pauses until ``_SETTLE_READS`` reads in a row show every
node's token (``NumNodes`` of them), writing its own again whenever it is gone. A
node that returned has seen every other node's token, so their first writes, the
ones that start from a stale comment, are behind it. When the other nodes' tokens do
not come within ``_MAX_READS`` reads (a prolog that failed or is late), a prolog whose
own token has stayed returns anyway: the rest is theirs to add. One-node jobs need
none of it.
"""

from __future__ import annotations

import re
import time

from acbslurm.errors import ConfigError, SlurmError
from acbslurm.gpuvalue import Gpu
from acbslurm.slurm.hostlist import expand_hostlist
from acbslurm.units import is_ascii_int

# On the hook path: no typing at run time (tests/unit/hooks/test_hooks_imports.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Sequence

PREFIX = "acbslurm:gpus="
_TOKEN = re.compile(r"acbslurm:gpus=(\S+)")
_ADMIN = re.compile(r"\bAdminComment=(.*?)(?=\s[A-Z][A-Za-z]*=|$)")
_NUM_NODES = re.compile(r"\bNumNodes=([0-9]+)")
_ARRAY_JOB = re.compile(r"(?:^|\s)ArrayJobId=([0-9]+)(?=\s|$)")
_ARRAY_TASK = re.compile(r"(?:^|\s)ArrayTaskId=([0-9]+)(?=\s|$)")
# A job on several nodes: how often a prolog writes its token at most, how many reads in
# a row must show every node's, how many reads it waits for the others' at most, and
# the pause before each read (seconds, random: two nodes' prologs fall out of step).
_ATTEMPTS = 4
_SETTLE_READS = 2
_MAX_READS = 10
_PAUSE = (0.15, 0.5)


def scontrol_name(show_job: str | None, job_id: str) -> str:
    """How ``scontrol update`` must name the job of this ``scontrol show job -o`` line:
    ``ARRAYJOB_TASK`` for an array task, else ``job_id``.

    An array's last task to start keeps the array's own id, and ``scontrol update
    job=<that id>`` applies to every task of the array (each gets this task's GPUs, or
    the update fails with "Job has already finished" once one of them ended). Slurm
    22.05 gives the prolog no SLURM_ARRAY_* variables; the line has both ids.
    """
    array_job = _ARRAY_JOB.search(show_job or "")
    task = _ARRAY_TASK.search(show_job or "")
    if array_job and task:
        return f"{array_job.group(1)}_{task.group(1)}"
    return job_id


def gpu_token(gpus: Sequence[Gpu]) -> str:
    """``acbslurm:gpus=vm:0=GPU-a,vm:1=GPU-b`` (Slurm's index, or ``-`` when Slurm gave
    UUIDs only)."""
    return PREFIX + ",".join(g.token() for g in gpus)


def merged_comment(
    current: str, node: str, token: str, nodes: Collection[str] | None = None
) -> str:
    """``current`` with this node's earlier token (a requeued run) replaced by ``token``
    and, given the job's ``nodes``, the tokens of nodes it no longer runs on dropped (a
    run requeued onto other nodes: the report and the other nodes' prologs would count
    them as this run's). The rest of the comment stays in its order."""
    kept = [w for w in current.split() if w == token or not _replaced(w, node, nodes)]
    return " ".join(kept if token in kept else [*kept, token])


def _replaced(word: str, node: str, nodes: Collection[str] | None) -> bool:
    if not word.startswith(PREFIX):
        return False
    where = {g.node for g in parse_gpus(word)}
    return node in where or (nodes is not None and not where & set(nodes))


def admin_comment(show_job: str) -> str:
    """The ``AdminComment`` of one ``scontrol show job -o`` line ("" when (null))."""
    m = _ADMIN.search(show_job)
    value = m.group(1).strip() if m else ""
    return "" if value in ("(null)", "") else value


def gpu_items(comment: str | None) -> list[str]:
    """Each device in a stored ``admin_comment`` as ``node:index=uuid``, the text
    ``parse_gpus(comment)``'s ``token()`` gives, without building the values: the
    report reads 100,000 comments and more (each item is checked, and rewritten only
    when its index is not written as ``Gpu.token`` writes it)."""
    out: list[str] = []
    for token in _TOKEN.findall(comment or ""):
        for item in token.split(","):
            where, _, uuid = item.partition("=")
            node, _, index = where.rpartition(":")
            if not (node and uuid):
                continue
            if not (is_ascii_int(index) and (index == "0" or index[0] != "0")):
                item = f"{node}:{int(index) if is_ascii_int(index) else '-'}={uuid}"
            out.append(item)
    return out


def parse_gpus(comment: str | None) -> list[Gpu]:
    """The devices in a stored ``admin_comment`` (no minors: they are not kept there)."""
    out: list[Gpu] = []
    for token in _TOKEN.findall(comment or ""):
        for item in token.split(","):
            where, _, uuid = item.partition("=")
            node, _, index = where.rpartition(":")
            if node and uuid:
                out.append(Gpu(uuid, int(index) if is_ascii_int(index) else None, node=node))
    return out


def record_job_gpus(
    job_id: str,
    gpus: Sequence[Gpu],
    *,
    shown: str | None = None,
    bin_dir: str = "",
    timeout: float = 5.0,
) -> None:
    """Add this node's GPUs (each names the node) to the job's AdminComment. ``shown``:
    the job's ``scontrol show job -o`` line when the caller has it already (the prolog
    does)."""
    from acbslurm.slurm.commands import slurm

    if not gpus:
        return
    node = gpus[0].node
    token = gpu_token(gpus)

    def read() -> str:
        argv = ["scontrol", "show", "job", "-o", job_id]
        return slurm(argv, timeout=timeout, bin_dir=bin_dir).stdout

    line = read() if shown is None else shown
    nodes = _num_nodes(line)
    now_on = _nodes_or_none(line)  # a running job's nodes do not change between reads
    for _ in range(_ATTEMPTS):
        current = " ".join(admin_comment(line).split())
        comment = merged_comment(current, node, token, now_on)
        if comment != current:
            argv = ["scontrol", "update", f"job={job_id}", f"AdminComment={comment}"]
            slurm(argv, timeout=timeout, bin_dir=bin_dir)
        if nodes < 2 or _settled(read, token, nodes):
            return
        line = read()
    raise SlurmError(
        ["scontrol", "update", f"job={job_id}", "AdminComment=..."],
        0,
        reason=f"this node's GPUs were overwritten by other nodes' {_ATTEMPTS} times",
    )


def job_nodes(show_job: str) -> list[str]:
    """The job's nodes from one ``scontrol show job -o`` line (``NodeList``), in order."""
    for tok in show_job.split():
        if tok.startswith("NodeList="):
            value = tok.partition("=")[2]
            return [] if value in ("", "(null)") else expand_hostlist(value)
    return []


def _nodes_or_none(show_job: str) -> list[str] | None:
    """``job_nodes``; None when the line names none, or a list it cannot read: then no
    other node's token is dropped."""
    try:
        return job_nodes(show_job) or None
    except ConfigError:
        return None


def _num_nodes(show_job: str) -> int:
    m = _NUM_NODES.search(show_job)
    return int(m.group(1)) if m else 1


def _token_nodes(tokens: list[str]) -> set[str]:
    """The nodes that have a token among ``tokens`` (a comment's words)."""
    return {d.node for t in tokens if t.startswith(PREFIX) for d in parse_gpus(t)}


def _settled(read: Callable[[], str], token: str, nodes: int) -> bool:
    """True when ``_SETTLE_READS`` reads in a row, each after a random pause, show
    ``token`` and every one of the job's ``nodes`` nodes' tokens, or when ``token`` stayed
    for ``_MAX_READS`` reads while others' were missing; False when ``token`` is gone."""
    import random  # only jobs on several nodes get here

    whole = 0
    for _ in range(_MAX_READS):
        time.sleep(random.uniform(*_PAUSE))  # noqa: S311 - jitter, not a secret
        tokens = admin_comment(read()).split()
        if token not in tokens:
            return False
        whole = whole + 1 if len(_token_nodes(tokens)) >= nodes else 0
        if whole >= _SETTLE_READS:
            return True
    return True
