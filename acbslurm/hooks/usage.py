"""The epilog keeps the job's record for the report in slurmdbd (``slurm/job_history.py``).

Each node's words: its GPUs (``acbslurm:gpus=``, from the prolog's job record) and, for a
pool job, its pool's usage (``slurm/usage_history.py``). The pool wrote its totals and
ledger in the job's runtime folder (``usagebook``), which the epilog removes next; a job
without a pool whose broker lent GPUs (``agarun`` programs) has the broker's
device-seconds per program there instead. Here they are read (as the job's user's
files: never through a link, bounded), bounded by the job's allocation (the GPUs Slurm
gave it times its elapsed time: a pool cannot claim more than that), and written into
the job's SystemComment through slurmdbd (``sacctmgr``), beside what is there.

The epilog only writes the words into ``<record_dir>/usage-pending/`` (one small file)
and starts a sender in a session of its own (``send_pending``, from
``epilog.history_sender_main``): slurmdbd's calls are slow (each request waits for a
delayed TCP acknowledgement on 22.05; docs/benchmarks.md, "Hooks and `acbslurm run`")
and a pool's usage waits until slurmdbd has recorded the job's end, none of which the
epilog, and the node's next job, should wait for. slurmd kills what is left in a hook's
process group when it returns; the sender is not in it. What the sender cannot send now
(slurmdbd or its database down, the end not recorded yet) stays and the next epilog's
sender sends it: nothing is lost (a job whose end is still not recorded after
``MAX_AGE``, a job requeued and held, is put aside as ``*.failed`` and said). Jobs
without GPUs and without a pool cost one failed ``open`` and one ``listdir``.

On the hook path: no typing at run time (tests/unit/hooks/test_hooks_imports.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import time

from acbslurm.errors import AcbslurmError, SlurmError
from acbslurm.slurm.job_history import has_others_words, with_node_words
from acbslurm.slurm.usage_history import usage_token
from acbslurm.units import is_ascii_int
from acbslurm.usagebook import Totals, read_broker_usage, read_job_usage

TYPE_CHECKING = False  # a lean-path module: CONTRIBUTING.md, "Lean imports"
if TYPE_CHECKING:
    from collections.abc import Callable

PENDING = "usage-pending"
END_WAIT = 3.0  # seconds a sender waits for slurmdbd to record a pool job's end
MAX_PER_SENDER = 6  # pending words one sender sends at most (each bounded in time)
# Files one sender looks at in all, those whose job's end is not recorded yet included
# (one sacct call each): a user's job held after a requeue keeps its file waiting, and
# waiting files must not take the others' turns or the sender's deadline.
MAX_TRIES = 3 * MAX_PER_SENDER
MAX_AGE = 7 * 86400.0  # seconds a kept file waits before it is put aside as failed
# JobIDRaw first: ``sacct -j`` of the id an array's last task keeps lists every task of
# the array, and the job's row is the one of its own id. SystemComment last: may hold |.
_SACCT_FIELDS = "JobIDRaw,JobID,State,End,ElapsedRaw,AllocTRES,NNodes,SystemComment"
# A job on several nodes: each node's sender reads the comment back after a random pause
# until its words stayed for _SETTLE_READS reads (another node's write may have started
# from a comment without them), writing them again at most _ATTEMPTS times.
_ATTEMPTS = 4
_SETTLE_READS = 2
_PAUSE = (0.2, 0.6)


class NotYet(AcbslurmError):
    """slurmdbd has not recorded the job (or its end, for a pool's usage): kept for later."""


class Unreachable(NotYet):
    """slurmdbd cannot be asked now: the other words would wait as long."""


class Row:
    """sacct's row of the job's own id (its newest run)."""

    __slots__ = ("alloc_tres", "elapsed", "end", "job_ref", "nodes", "state", "system_comment")

    def __init__(self, fields: list[str]) -> None:
        job_ref, self.state, self.end, elapsed, self.alloc_tres, nodes, comment = fields
        # An array task as ARRAY_TASK: its raw id, when it is the array's own (the last
        # task's), would name every task of the array to sacctmgr.
        self.job_ref = job_ref
        self.elapsed = int(elapsed) if is_ascii_int(elapsed) else 0
        self.nodes = int(nodes) if is_ascii_int(nodes) else 1
        self.system_comment = comment

    @property
    def ended(self) -> bool:
        return self.end not in ("", "Unknown") and "RUNNING" not in self.state


def keep_history(
    job_id: str,
    uid: int,
    node: str,
    folder: str,
    record_dir: str,
    gpus_word: str,
    say: Callable[[str, str], None],
) -> bool:
    """This node's words of the job (``gpus_word``: its GPUs, "" for none; the usage its
    pool or broker left in ``folder``) into the pending folder for the sender; True when
    there is something to send."""
    got = None
    if uid >= 0:
        try:
            got = read_job_usage(folder, uid)
            if got is None:  # no pool: the job's broker's clients (agarun programs), if any
                broker = read_broker_usage(folder, uid)
                got = None if broker is None else (broker, 0, 0)
        except (OSError, ValueError) as exc:
            say("warning", f"job {job_id}: its GPU usage in {folder} cannot be read: {exc}")
    if got is None and not gpus_word:
        return False
    totals, lost = (got[0], got[2]) if got is not None else (None, 0)
    from acbslurm.hooks.jobmap import replace_file

    pending = os.path.join(record_dir, PENDING)
    os.makedirs(pending, mode=0o700, exist_ok=True)
    data = {
        "job_id": job_id,
        "node": node,
        "gpus": gpus_word,
        "lost": lost,
        "kept": time.time(),  # its age: the file's time moves when it waits its turn
        "totals": None if totals is None else totals.as_dict(),
    }
    fd = os.open(pending, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        replace_file(fd, pending, pending_name(job_id, node), json.dumps(data), 0o600)
    finally:
        os.close(fd)
    return True


def has_pending(record_dir: str) -> bool:
    try:
        return any(n.endswith(".json") for n in os.listdir(os.path.join(record_dir, PENDING)))
    except FileNotFoundError:
        return False


def send(
    job_id: str,
    node: str,
    gpus_word: str,
    totals: Totals | None,
    lost: int,
    bin_dir: str,
    wait: float,
    say: Callable[[str, str], None],
) -> None:
    """Write ``node``'s words into the job's SystemComment in slurmdbd, beside the rest."""
    row = _row(job_id, bin_dir, wait, need_end=totals is not None)
    words = [gpus_word] if gpus_word else []
    if totals is not None:
        word = _usage_word(job_id, node, totals, lost, row, say)
        if word:
            words.append(word)
    for _ in range(_ATTEMPTS):
        comment = with_node_words(row.system_comment, node, words)
        if comment.lower() != row.system_comment.lower():  # 22.05's sacctmgr lowercases
            words = _write_or_gpus_alone(job_id, row, node, words, comment, bin_dir, say)
        if row.nodes < 2 or _settled(job_id, words, bin_dir):
            return
        row = _row(job_id, bin_dir, 0, need_end=False)
    raise ValueError(f"this node's words were overwritten by other nodes' {_ATTEMPTS} times")


def _usage_word(
    job_id: str, node: str, totals: Totals, lost: int, row: Row, say: Callable[[str, str], None]
) -> str:
    """The usage word, bounded by the allocation; "" for a job without Slurm's GPUs (a
    broker on CPU stand-ins: nothing to account)."""
    bound = _gpus(row.alloc_tres) * max(0, row.elapsed)
    if bound == 0:
        return ""
    if totals.bound_shares():
        say(
            "warning",
            f"job {job_id}: its pool gives its keys more GPU-seconds than it leased; "
            "scaled down to what it leased",
        )
    if totals.leased_total > bound + 1:
        say(
            "warning",
            f"job {job_id}: its pool claims {totals.leased_total:.1f} GPU-seconds leased, "
            f"more than the {bound} it was allocated; scaled down to that",
        )
        totals.scaled(bound / totals.leased_total if totals.leased_total else 0.0)
    return usage_token(node, totals, lost)


def _write_or_gpus_alone(
    job_id: str,
    row: Row,
    node: str,
    words: list[str],
    comment: str,
    bin_dir: str,
    say: Callable[[str, str], None],
) -> list[str]:
    """``comment`` written; if slurmdbd refuses it with a usage word, once more with the
    GPUs' word alone (the usage word must not take the GPUs' with it). The words written."""
    try:
        _write(row.job_ref, comment, bin_dir)
        return words
    except SlurmError as exc:
        if len(words) < 2:
            raise
        say(
            "error",
            f"job {job_id}: slurmdbd refused its usage word ({len(words[1])} bytes): "
            f"{exc.reason or exc}; writing its GPUs alone",
        )
    words = words[:1]
    _write(row.job_ref, with_node_words(row.system_comment, node, words), bin_dir)
    return words


def _write(job_ref: str, comment: str, bin_dir: str) -> None:
    from acbslurm.slurm.commands import slurm

    # sacctmgr cuts at quotes, and slurmdbd puts the text into its SQL unescaped.
    if any(c in comment for c in "'\"\\"):
        raise ValueError("the job's SystemComment has quotes or backslashes: not rewritten")
    argv = ["sacctmgr", "-i", "modify", "job", "where", f"jobid={job_ref}"]
    try:
        slurm([*argv, "set", f"SystemComment={comment}"], timeout=5, bin_dir=bin_dir)
    except SlurmError as exc:
        if exc.returncode is None:  # timed out, not there: slurmdbd cannot be asked now
            raise Unreachable(f"sacctmgr: {exc.reason or exc}") from None
        raise  # a refusal


def _settled(job_id: str, words: list[str], bin_dir: str) -> bool:
    """True when ``words`` stayed for ``_SETTLE_READS`` reads, each after a random pause."""
    import random  # only jobs on several nodes get here

    for _ in range(_SETTLE_READS):
        time.sleep(random.uniform(*_PAUSE))  # noqa: S311 - jitter, not a secret
        now = _row(job_id, bin_dir, 0, need_end=False).system_comment.lower().split()
        if not all(w.lower() in now for w in words):
            return False
    return True


def _row(job_id: str, bin_dir: str, wait: float, need_end: bool) -> Row:
    """sacct's row of the job, once slurmdbd has it (and its end, with ``need_end``, or
    when its SystemComment holds another tool's text: slurmctld's record of the end
    carries the SystemComment it has, a burst buffer's, and would overwrite one written
    before it; without one of its own it leaves the column alone)."""
    from acbslurm.slurm.commands import slurm

    argv = ["sacct", "-X", "-n", "-P", "-j", job_id, "-o", _SACCT_FIELDS]
    deadline = time.monotonic() + wait
    while True:
        try:
            out = slurm(argv, timeout=5, bin_dir=bin_dir).stdout
        except SlurmError as exc:
            raise Unreachable(f"sacct: {exc.reason or exc}") from None
        fields = _own_fields(out, job_id)
        row = Row(fields) if fields is not None else None
        if row is not None and _writable(row, need_end):
            return row
        if time.monotonic() >= deadline:
            what = "the job" if row is None else "the job's end"
            raise NotYet(f"{what} is not recorded in slurmdbd yet")
        time.sleep(0.1)


def _writable(row: Row, need_end: bool) -> bool:
    return row.ended or not (need_end or has_others_words(row.system_comment))


def _own_fields(sacct_out: str, job_id: str) -> list[str] | None:
    """The fields after JobIDRaw of the newest row of the job's own id (a requeued job
    has one per run), None without one."""
    rows = [r.split("|", 7) for r in sacct_out.splitlines()]
    own = [r[1:] for r in rows if len(r) == 8 and r[0].strip() == job_id]
    return own[-1] if own else None


def _gpus(alloc_tres: str) -> int:
    for item in alloc_tres.split(","):
        name, _, value = item.partition("=")
        if name == "gres/gpu":
            with contextlib.suppress(ValueError):
                return int(value)
    return 0


def pending_name(job_id: str, node: str) -> str:
    """The name of the file the epilog of ``job_id`` on ``node`` keeps its words in."""
    return f"{job_id}.{node}.json"


def send_pending(
    record_dir: str,
    bin_dir: Callable[[], str],
    say: Callable[[str, str], None],
    first: str = "",
) -> None:
    """The words this node's epilogs kept, sent (a few, one sender at a time: another
    running leaves them to it). ``first``, the starting epilog's own file, goes first
    and may wait for slurmdbd to record its job's end; the others, oldest first, get one
    look each. One whose job's end is not recorded yet takes no turn of the others and
    goes to the back of the line."""
    import fcntl

    folder = os.path.join(record_dir, PENDING)
    try:
        lock = os.open(os.path.join(folder, ".lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except FileNotFoundError:
        return
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # another sender is at it; it looks again before it ends
        sent = 0
        tried: set[str] = set()
        while sent < MAX_PER_SENDER and len(tried) < MAX_TRIES:
            name = _next_pending(folder, first, tried)
            if name is None:
                return
            tried.add(name)
            got = _send_one(os.path.join(folder, name), bin_dir, say, own=name == first)
            if got == "away":
                return  # slurmdbd away: the rest would wait as long
            sent += got == "done"
    finally:
        os.close(lock)


def _next_pending(folder: str, first: str, tried: set[str]) -> str | None:
    """``first`` if it is there and not tried, else the oldest file not tried (by the
    file's time), None when none is left."""
    names = [n for n in os.listdir(folder) if n.endswith(".json") and n not in tried]
    if first in names:
        return first
    aged = []
    for n in names:
        with contextlib.suppress(OSError):
            aged.append((os.stat(os.path.join(folder, n), follow_symlinks=False).st_mtime, n))
    return min(aged)[1] if aged else None


# complexity: one pending file's fate, a branch each: sent, kept for later, put aside
# (after MAX_AGE, or unreadable), or kept because slurmdbd cannot be asked.
def _send_one(
    path: str, bin_dir: Callable[[], str], say: Callable[[str, str], None], own: bool
) -> str:
    """One pending file sent (and removed) or put aside ("done"), kept for later
    ("later"), or kept because slurmdbd cannot be asked ("away")."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with open(fd, encoding="utf-8") as fh:
            data = json.load(fh)
            kept = float(data.get("kept") or os.fstat(fh.fileno()).st_mtime)
        raw = data.get("totals")
        totals = None if raw is None else Totals.from_dict(raw)
        wait = END_WAIT if totals is not None and own else 0.0
        gpus = str(data.get("gpus") or "")
        job, node = str(data["job_id"]), str(data["node"])
        send(job, node, gpus, totals, int(data.get("lost", 0)), bin_dir(), wait, say)
    except Unreachable:
        return "away"
    except (NotYet, SlurmError) as exc:
        # A sacctmgr that failed (slurmdbd going away as it answered) may work at the
        # next look, as a job slurmdbd has not recorded yet may be recorded by then:
        # kept for a later sender, to the back of the line; after MAX_AGE put aside.
        if time.time() - kept > MAX_AGE:
            _put_aside(path, f"{exc} after {MAX_AGE / 86400:.0f} days", say)
            return "done"
        with contextlib.suppress(OSError):
            os.utime(path, follow_symlinks=False)
        if isinstance(exc, SlurmError):
            say("warning", f"the record kept in {path} waits for a later epilog: {exc}")
        return "later"
    except (AcbslurmError, OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        _put_aside(path, str(exc), say)
        return "done"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    say("info", f"job {data['job_id']}: its record kept in {path} is in slurmdbd now")
    return "done"


def _put_aside(path: str, why: str, say: Callable[[str, str], None]) -> None:
    """Never going to work: put aside (for an admin to read), not retried forever."""
    with contextlib.suppress(OSError):
        os.replace(path, f"{path}.failed")
    say("error", f"the record kept in {path} cannot be sent ({why}); left in {path}.failed")
