"""Where acbslurm's record of an ended job lives in slurmdbd: its SystemComment.

While a job runs, its prologs keep its GPUs in its AdminComment (``gpu_history``), which
slurmctld hands to slurmdbd and ``squeue`` shows. Princeton jobstats' slurmctld epilog
replaces a job's whole AdminComment about 5 s after the job ends
(``sacctmgr -i update job where jobid=J set AdminComment=JS1:<blob>``), so at the end
each node's epilog copies that node's words (its GPUs, ``acbslurm:gpus=``, and its pool's
usage, ``acbslurm:usage=``) into the job's SystemComment in slurmdbd: a field that only
a Slurm administrator or operator may write (``as_mysql_modify_job``, 22.05 to 26.05),
that no submission or ``scontrol update`` carries, and that no tool of ours knows to
overwrite. Another tool's text there (a burst buffer's) is kept: acbslurm replaces its
own words only. docs/design.md, "Where acbslurm's record of a job lives", says why.

The report reads both (``record_text``): each node's words from the SystemComment, and
from the AdminComment those of nodes the SystemComment has none of (records written
before, or a job whose epilog could not reach slurmdbd yet).

Debian's sacctmgr 22.05 lowercases what it writes (23.02 does not): a UUID comes back
as ``gpu-...``; ``gpu_history`` reads it back as ``GPU-...``, NVIDIA's form.

On the hook path: no typing at run time (tests/unit/hooks/test_hooks_imports.py).
"""

from __future__ import annotations

from acbslurm.slurm.gpu_history import PREFIX as GPUS
from acbslurm.slurm.usage_history import PREFIX as USAGE

TYPE_CHECKING = False  # a lean-path module: CONTRIBUTING.md, "Lean imports"
if TYPE_CHECKING:
    from collections.abc import Iterable


def _node_of(word: str) -> str | None:
    """The node an acbslurm word is about ("" when it names none); None for others'."""
    lower = word.lower()  # 22.05's sacctmgr wrote it lowercased
    if lower.startswith(USAGE):
        return word[len(USAGE) :].split(";", 1)[0].lower()
    if lower.startswith(GPUS):
        first = word[len(GPUS) :].split(",", 1)[0]
        return first.partition("=")[0].rpartition(":")[0].lower()
    return None


def _kind(word: str) -> str:
    return USAGE if word.lower().startswith(USAGE) else GPUS


def with_node_words(comment: str, node: str, words: Iterable[str]) -> str:
    """``comment`` with ``node``'s acbslurm words of the kinds in ``words`` replaced by
    ``words``, in place (a word not there yet goes last); the rest, another tool's text
    too, kept in its order."""
    new = {_kind(w): w for w in words if w}
    out: list[str] = []
    for w in comment.split():
        kind = _kind(w)
        if _node_of(w) != node.lower() or kind not in new:
            out.append(w)
        elif new[kind] not in out:
            out.append(new[kind])
    return " ".join([*out, *(w for w in new.values() if w not in out)])


def has_others_words(comment: str) -> bool:
    """Whether ``comment`` holds a word that is not acbslurm's (a burst buffer's)."""
    return any(_node_of(w) is None for w in comment.split())


def record_text(admin_comment: str | None, system_comment: str | None) -> str:
    """The acbslurm words of a job's row (what ``gpu_items`` and ``parse_usage`` read):
    the SystemComment's, and the AdminComment's of each node and kind the SystemComment
    has none of. Fast for the rows without any."""
    system = system_comment or ""
    admin = admin_comment or ""
    if "acbslurm:" not in admin.lower():
        return system
    if "acbslurm:" not in system.lower():
        return admin
    have = {(_node_of(w), _kind(w)) for w in system.split() if _node_of(w) is not None}
    older = [
        w for w in admin.split() if _node_of(w) is not None and (_node_of(w), _kind(w)) not in have
    ]
    return " ".join([system, *older])
