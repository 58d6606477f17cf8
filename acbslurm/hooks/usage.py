"""The epilog keeps a pool job's usage (or its broker's) in Slurm (``slurm/usage_history.py``).

The pool wrote its totals and ledger in the job's runtime folder (``usagebook``), which
the epilog removes next; a job without a pool whose broker lent GPUs (``agarun``
programs) has the broker's device-seconds per program there instead. Here they are
read (as the job's user's files: never through a link, bounded), bounded by the job's
allocation (the GPUs Slurm gave it times its elapsed time: a pool cannot claim more
than that), and written to the job's AdminComment through slurmdbd once the job's end
is recorded there.

When that cannot be done now (slurmdbd or its database down, the end not recorded in
time), the word is kept in ``<record_dir>/usage-pending/`` and the next epilog on the
node sends it: nothing is lost, and the epilog says so. Jobs without a pool cost one
failed ``open`` and one ``listdir``.

On the hook path: no typing at run time (tests/unit/hooks/test_hooks_imports.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import time

from acbslurm.errors import AcbslurmError
from acbslurm.slurm.usage_history import usage_token, with_usage
from acbslurm.usagebook import Totals, read_broker_usage, read_job_usage

# On the hook path: no typing at run time (tests/unit/hooks/test_hooks_imports.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

PENDING = "usage-pending"
END_WAIT = 3.0  # seconds the epilog waits for slurmdbd to record the job's end
MAX_RETRIES_PER_HOOK = 4  # pending words one epilog sends at most (each bounded in time)
# JobIDRaw first: ``sacct -j`` of the id an array's last task keeps lists every task of
# the array, and the job's row is the one of its own id. AdminComment last: may hold |.
_SACCT_FIELDS = "JobIDRaw,State,End,ElapsedRaw,AllocTRES,AdminComment"


class NotYet(AcbslurmError):
    """slurmdbd has not recorded the job's end (or cannot be asked): kept for later."""


def keep_usage(
    job_id: str,
    uid: int,
    node: str,
    folder: str,
    record_dir: str,
    bin_dir: Callable[[], str],
    say: Callable[[str, str], None],
) -> None:
    """The usage the job's pool left in ``folder`` into the job's AdminComment, or into
    the pending folder when slurmdbd cannot take it now (said as a warning)."""
    try:
        got = read_job_usage(folder, uid)
        if got is None:  # no pool: the job's broker's clients (agarun programs), if any
            broker = read_broker_usage(folder, uid)
            got = None if broker is None else (broker, 0, 0)
    except (OSError, ValueError) as exc:
        say("warning", f"job {job_id}: its GPU usage in {folder} cannot be read: {exc}")
        return
    if got is None:
        return
    totals, _, lost = got
    try:
        send(job_id, node, totals, lost, bin_dir(), END_WAIT, say)
    except (AcbslurmError, ValueError) as exc:
        path = _keep_pending(record_dir, job_id, node, totals, lost)
        say(
            "warning",
            f"job {job_id}: its pool's usage is not in slurmdbd yet ({exc}); kept in {path}, "
            "the next epilog on this node sends it",
        )


def send(
    job_id: str,
    node: str,
    totals: Totals,
    lost: int,
    bin_dir: str,
    wait: float,
    say: Callable[[str, str], None],
) -> None:
    """Write ``node``'s usage word into the job's AdminComment in slurmdbd."""
    from acbslurm.slurm.commands import slurm

    fields = _ended(job_id, bin_dir, wait)
    bound = _gpus(fields[3]) * max(0, int(fields[2] or 0))
    if bound == 0:
        return  # no GPU of Slurm's (a broker on CPU stand-ins): nothing to account
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
    comment = with_usage(fields[4], node, usage_token(node, totals, lost))
    if any(c in comment for c in "'\"\\"):
        raise ValueError("the job's AdminComment has quotes or backslashes: not rewritten")
    argv = ["sacctmgr", "-i", "modify", "job", "where", f"jobid={job_id}"]
    slurm([*argv, "set", f"AdminComment={comment}"], timeout=5, bin_dir=bin_dir)


def _ended(job_id: str, bin_dir: str, wait: float) -> list[str]:
    """sacct's fields of the job once its end is recorded (slurmctld's record of the end
    carries the AdminComment it has, and would overwrite one written before it)."""
    from acbslurm.errors import SlurmError
    from acbslurm.slurm.commands import slurm

    argv = ["sacct", "-X", "-n", "-P", "-j", job_id, "-o", _SACCT_FIELDS]
    deadline = time.monotonic() + wait
    while True:
        try:
            out = slurm(argv, timeout=5, bin_dir=bin_dir).stdout
        except SlurmError as exc:
            raise NotYet(f"sacct: {exc.reason or exc}") from None
        fields = _ended_fields(out, job_id)
        if fields is not None:
            return fields
        if time.monotonic() >= deadline:
            raise NotYet("the job's end is not recorded in slurmdbd yet")
        time.sleep(0.1)


def _ended_fields(sacct_out: str, job_id: str) -> list[str] | None:
    """The job's fields (State, End, ElapsedRaw, AllocTRES, AdminComment) when sacct
    shows its end recorded, else None. The newest row of the job's own id (a requeued
    job has one per run)."""
    rows = [r.split("|", 5) for r in sacct_out.splitlines()]
    own = [r[1:] for r in rows if len(r) == 6 and r[0].strip() == job_id]
    fields = own[-1] if own else []
    if fields and fields[1] not in ("", "Unknown") and "RUNNING" not in fields[0]:
        return fields
    return None


def _gpus(alloc_tres: str) -> int:
    for item in alloc_tres.split(","):
        name, _, value = item.partition("=")
        if name == "gres/gpu":
            with contextlib.suppress(ValueError):
                return int(value)
    return 0


def _keep_pending(record_dir: str, job_id: str, node: str, totals: Totals, lost: int) -> str:
    folder = os.path.join(record_dir, PENDING)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    path = os.path.join(folder, f"{job_id}.{node}.json")
    data = {"job_id": job_id, "node": node, "lost": lost, "totals": totals.as_dict()}
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)
    return path


def send_pending(
    record_dir: str, bin_dir: Callable[[], str], say: Callable[[str, str], None]
) -> None:
    """The usage words earlier epilogs of this node could not send, sent now (a few)."""
    folder = os.path.join(record_dir, PENDING)
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".json"))
    except FileNotFoundError:
        return
    for name in names[:MAX_RETRIES_PER_HOOK]:
        path = os.path.join(folder, name)
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
            totals = Totals.from_dict(data["totals"])
            send(
                str(data["job_id"]), str(data["node"]), totals, int(data["lost"]), bin_dir(), 0, say
            )
        except NotYet:
            return  # slurmdbd still away: the rest would wait as long
        except (AcbslurmError, OSError, ValueError, KeyError, TypeError) as exc:
            # Never going to work: put aside (for an admin to read), not retried forever.
            with contextlib.suppress(OSError):
                os.replace(path, f"{path}.failed")
            say("error", f"the usage kept in {path} cannot be sent ({exc}); left in {path}.failed")
            continue
        os.unlink(path)
        say("info", f"job {data['job_id']}: its pool's usage kept in {path} is in slurmdbd now")
