"""The CPUs and memory Slurm gave a job on this node (the prolog's environment lacks them).

Read from ``scontrol show job -d -o``: its per-node detail (``Nodes=n1 CPU_IDs=0-1
Mem=2048``) and, for a one-node job without detail, ``NumCPUs`` and ``TRES mem=``.
"""

from __future__ import annotations

import re
import time

from acbslurm.slurm.hostlist import expand_hostlist
from acbslurm.units import expand_ranges, is_ascii_int, size_bytes
from acbslurm.values import frozen

# On the hook path: no typing at run time (tests/unit/hooks/test_hooks_imports.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

# GRES items are split at a comma before a name (IDX lists hold commas too).
_GRES_CHUNK = re.compile(r",(?=[A-Za-z])")
_IDX = re.compile(r"\(IDX:([0-9,\-]+)\)")


@frozen
class Allocation:
    cpus: int = 0  # 0: unknown
    mem_mb: int = 0  # 0: unknown, or a site that does not schedule memory
    # The job's GPU indices on the node from scontrol's ``GRES=`` detail (None: no
    # detail). Slurm 22.05 gives the prolog a SLURM_JOB_GPUS of one GRES type only
    # (``--gres=gpu:h200:1,gpu:a100:1``: the a100's index alone); this has all.
    gpu_indices: tuple[int, ...] | None = None


def gres_gpu_indices(gres: str) -> tuple[int, ...]:
    """``gpu:h200:1(IDX:0),gpu:a100:2(IDX:1,3)`` (typed or not) -> (0, 1, 3)."""
    out: set[int] = set()
    for chunk in _GRES_CHUNK.split(gres):
        if chunk == "gpu" or chunk.startswith(("gpu:", "gpu(")):
            for idx in _IDX.findall(chunk):
                out.update(expand_ranges(idx))
    return tuple(sorted(out))


def _node_group(tokens: list[str]) -> Allocation:
    """``CPU_IDs=0-1 Mem=2048 GRES=gpu:1(IDX:0)``: one node group's allocation."""
    cpus = count_cpu_ids(tokens[0].partition("=")[2])
    mem = 0
    if len(tokens) > 1 and tokens[1].startswith("Mem="):
        mem = mem_to_mb(tokens[1].partition("=")[2])
    gres: tuple[int, ...] | None = None
    for tok in tokens[1:4]:
        if tok.startswith("Nodes="):
            break
        if tok.startswith("GRES="):
            gres = gres_gpu_indices(tok.partition("=")[2])
    return Allocation(cpus, mem, gres)


def count_cpu_ids(spec: str) -> int:
    """``0-1,4`` -> 3."""
    return len(expand_ranges(spec))


def mem_to_mb(value: str) -> int:
    """``2048`` / ``2048M`` / ``2G`` (scontrol's memory) -> megabytes."""
    return size_bytes(value, default_unit="M") // 1024**2


def parse_scontrol_job(text: str, node: str) -> Allocation:
    """The allocation on ``node`` from one ``scontrol show job -d -o`` line."""
    tokens = text.split()
    fields: dict[str, str] = {}
    for i, tok in enumerate(tokens):
        key, _, value = tok.partition("=")
        if key == "Nodes" and i + 1 < len(tokens) and tokens[i + 1].startswith("CPU_IDs="):
            if node in expand_hostlist(value):
                return _node_group(tokens[i + 1 :])
            continue
        fields.setdefault(key, value)
    if fields.get("NumNodes", "").split("-")[0] != "1":
        return Allocation()
    cpus = int(fields["NumCPUs"]) if is_ascii_int(fields.get("NumCPUs", "")) else 0
    return Allocation(cpus, _tres_mem_mb(fields.get("TRES", "")))


def _tres_mem_mb(tres: str) -> int:
    """The memory of a ``TRES=cpu=2,mem=4G,...`` value in megabytes (0 without one)."""
    mem = 0
    for item in tres.split(","):
        k, _, v = item.partition("=")
        if k == "mem" and v:
            mem = mem_to_mb(v)
    return mem


def own_line(text: str, job_id: str) -> str:
    """The line of job ``job_id`` in ``scontrol show job -o`` output.

    The last task of an array to start keeps the array's id, and ``scontrol show job
    <that id>`` lists every task of the array: the first line may be another task's
    (its CPUs, its AdminComment). A task's own line has ``JobId=<its id>``.
    Without one, "": never another task's line, whose CPUs and AdminComment the prolog
    would take for its own job's.
    """
    mine = f"JobId={job_id}"
    for ln in text.splitlines():
        if mine in ln.split():
            return ln
    return ""


# The prolog's query of slurmctld: one timeout per attempt. A controller working
# through a burst (128 prologs at once) answered in 5-11 s; one that timed out is asked
# once more, for longer, so the job's record depends less on the controller's pace,
# and the prolog (which the job waits for) stays bounded: 15 s of queries at most.
QUERY_TIMEOUTS = (5.0, 10.0)
# Before asking again after an answer that came back at once (a refused connection).
_RETRY_PAUSE = 0.5


def allocation_retried(
    job_id: str,
    node: str,
    bin_dir: str = "",
    timeouts: tuple[float, ...] = QUERY_TIMEOUTS,
    retrying: Callable[[str], None] | None = None,
) -> tuple[Allocation, str]:
    """``allocation_and_text``, asked again (one attempt per item of ``timeouts``) when
    scontrol did not answer or failed; an answer that cannot be read is not asked
    again (it would read the same). ``retrying`` hears why before each new attempt."""
    from acbslurm.errors import SlurmError

    for timeout in timeouts[:-1]:
        started = time.monotonic()
        try:
            return allocation_and_text(job_id, node, bin_dir, timeout)
        except SlurmError as exc:
            if exc.returncode == 0:
                raise  # scontrol answered: what it said does not change on asking again
            if retrying is not None:
                retrying(str(exc).splitlines()[0])
            if time.monotonic() - started < timeout / 2:
                time.sleep(_RETRY_PAUSE)
    return allocation_and_text(job_id, node, bin_dir, timeouts[-1])


def job_allocation(job_id: str, node: str, bin_dir: str = "", timeout: float = 5.0) -> Allocation:
    """``allocation_and_text``, the allocation alone."""
    return allocation_and_text(job_id, node, bin_dir, timeout)[0]


def allocation_and_text(
    job_id: str, node: str, bin_dir: str = "", timeout: float = 5.0
) -> tuple[Allocation, str]:
    """Ask slurmctld (through the site's scontrol in ``bin_dir``).

    Never an unknown allocation: a prolog that fell back to "no limits" would let the
    job's containers take the whole node. ``SlurmError`` says which scontrol ran, its
    exit code and error, and where the bin directory came from.
    """
    from acbslurm.errors import CommandError, SlurmError
    from acbslurm.slurm.binaries import client
    from acbslurm.slurm.commands import slurm

    scontrol = client("scontrol", bin_dir)
    where = f"slurm_bin_dir {bin_dir}" if bin_dir else "PATH (set slurm_bin_dir)"
    argv = [scontrol, "show", "job", "-d", "-o", job_id]
    try:
        res = slurm(argv, timeout=timeout, bin_dir=bin_dir)
    except CommandError as exc:
        detail = (exc.stderr or "").strip().splitlines()
        why = detail[-1] if detail else exc.reason
        raise SlurmError(
            argv,
            exc.returncode,
            exc.stdout,
            exc.stderr,
            reason=f"{scontrol} (from {where}) failed: {why}",
        ) from None
    line = own_line(res.stdout, job_id)
    try:
        alloc = parse_scontrol_job(line, node)
    except ValueError as exc:
        raise SlurmError(
            argv, 0, res.stdout, "", reason=f"cannot parse {scontrol}'s answer: {exc}"
        ) from None
    # Memory may be 0: a site that does not schedule memory (CR_Core) gives none.
    if alloc.cpus <= 0:
        raise SlurmError(
            argv, 0, res.stdout, "", reason=f"{scontrol} names no CPUs of job {job_id} on {node}"
        )
    return alloc, line  # the whole line: the prolog also reads its AdminComment
