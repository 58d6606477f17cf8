"""Which GPUs (UUIDs) a job used, kept by Slurm itself after the job is gone.

slurmdbd 22.05 stores a job's GPU *count* only, and the prolog's job record is deleted by
the epilog, so "which GPU did job 42 use" had no answer once job 42 ended. The prolog
therefore writes the exact devices into the job's ``AdminComment``: a field only an
admin (the prolog runs as root) may set, which slurmctld hands to slurmdbd with the job
and the report reads back from the ``admin_comment`` column. The comment an admin gave
the job is kept; acbslurm adds one token, ``acbslurm:gpus=NODE:INDEX=UUID,...``. When the
job ends, each node's epilog copies its token into the job's SystemComment, which
Princeton jobstats does not overwrite (``job_history.py``); the report reads both.

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

from acbslurm.errors import SlurmError
from acbslurm.gpuvalue import Gpu
from acbslurm.units import is_ascii_int

TYPE_CHECKING = False  # a lean-path module: CONTRIBUTING.md, "Lean imports"
if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterator, Sequence

    from acbslurm.slurm.allocation import JobFacts

PREFIX = "acbslurm:gpus="
# A token is a word of the comment of its own (never the inside of another word).
_TOKEN = re.compile(r"(?:^|\s)acbslurm:gpus=(\S+)")
# A job on several nodes: how often a prolog writes its token at most, how many reads in
# a row must show every node's, how many reads it waits for the others' at most, and
# the pause before each read (seconds, random: two nodes' prologs fall out of step).
_ATTEMPTS = 4
_SETTLE_READS = 2
_MAX_READS = 10
_PAUSE = (0.15, 0.5)


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


def _nvidia_case(uuid: str) -> str:
    """``GPU-...``/``MIG-...`` as NVIDIA writes them: Debian's sacctmgr 22.05 lowercases
    what it writes (job_history.py); the hex digits are lowercase in NVML's own form."""
    head = uuid[:4]
    return head.upper() + uuid[4:] if head in ("gpu-", "mig-") else uuid


def gpu_items(comment: str | None) -> list[str]:
    """Each device in a stored ``admin_comment`` as ``node:index=uuid``, the text
    ``parse_gpus(comment)``'s ``token()`` gives, without building the values: the
    report reads 100,000 comments and more (each item is checked, and rewritten only
    when its index is not written as ``Gpu.token`` writes it)."""
    return [
        item if _as_written(index, uuid) else _rewritten(node, index, uuid)
        for item, node, index, uuid in _items(comment)
    ]


def _items(comment: str | None) -> Iterator[tuple[str, str, str, str]]:
    """Each ``node:index=uuid`` of the comment's tokens, and its three parts as written:
    the one reader of what ``Gpu.token`` writes."""
    for token in _TOKEN.findall(comment or ""):
        for item in token.split(","):
            where, _, uuid = item.partition("=")
            node, _, index = where.rpartition(":")
            if node and uuid:
                yield item, node, index, uuid


def _as_written(index: str, uuid: str) -> bool:
    """Whether an item reads as ``Gpu.token`` writes it: a plain index, NVIDIA's case."""
    plain = is_ascii_int(index) and (index == "0" or index[0] != "0")
    return plain and uuid[:4] not in ("gpu-", "mig-")


def _rewritten(node: str, index: str, uuid: str) -> str:
    return f"{node}:{int(index) if is_ascii_int(index) else '-'}={_nvidia_case(uuid)}"


def parse_gpus(comment: str | None) -> list[Gpu]:
    """The devices in a stored ``admin_comment`` (no minors: they are not kept there)."""
    return [
        Gpu(_nvidia_case(uuid), int(index) if is_ascii_int(index) else None, node=node)
        for _, node, index, uuid in _items(comment)
    ]


def record_job_gpus(
    ref: str,
    gpus: Sequence[Gpu],
    facts: JobFacts,
    *,
    bin_dir: str = "",
    timeout: float = 5.0,
) -> None:
    """Add this node's GPUs (each names the node) to the AdminComment of the job of
    ``facts`` (squeue's, which the prolog has already; ``ref``: how scontrol names the
    job alone). Read again through squeue (``allocation.query_job_facts``): never
    from ``scontrol show job`` text, where a job's name can hold ``AdminComment=``."""
    from acbslurm.slurm.allocation import query_job_facts
    from acbslurm.slurm.commands import slurm

    if not gpus:
        return
    node = gpus[0].node
    token = gpu_token(gpus)

    def read() -> str:
        return query_job_facts(facts.job_id, bin_dir, timeout).admin_comment

    comment_now = facts.admin_comment
    now_on = facts.nodes or None  # a running job's nodes do not change between reads
    for _ in range(_ATTEMPTS):
        current = " ".join(comment_now.split())
        comment = merged_comment(current, node, token, now_on)
        if comment != current:
            argv = ["scontrol", "update", f"job={ref}", f"AdminComment={comment}"]
            slurm(argv, timeout=timeout, bin_dir=bin_dir)
        if facts.num_nodes < 2 or _settled(read, token, facts.num_nodes):
            return
        comment_now = read()
    raise SlurmError(
        ["scontrol", "update", f"job={ref}", "AdminComment=..."],
        0,
        reason=f"this node's GPUs were overwritten by other nodes' {_ATTEMPTS} times",
    )


def _settled(read: Callable[[], str], token: str, nodes: int) -> bool:
    """True when ``_SETTLE_READS`` reads in a row, each after a random pause, show
    ``token`` and every one of the job's ``nodes`` nodes' tokens, or when ``token`` stayed
    for ``_MAX_READS`` reads while others' were missing; False when ``token`` is gone."""
    import random  # only jobs on several nodes get here

    whole = 0
    for _ in range(_MAX_READS):
        time.sleep(random.uniform(*_PAUSE))  # noqa: S311 - jitter, not a secret
        tokens = read().split()
        if token not in tokens:
            return False
        with_token = {d.node for t in tokens if t.startswith(PREFIX) for d in parse_gpus(t)}
        whole = whole + 1 if len(with_token) >= nodes else 0
        if whole >= _SETTLE_READS:
            return True
    return True
