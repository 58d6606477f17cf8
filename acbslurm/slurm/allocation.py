"""What slurmctld gave a job, for the prolog: its CPUs, memory and GPUs on this node,
its nodes, its array ids and its AdminComment (the prolog's environment lacks most).

None of it is read from text a user can shape. ``scontrol show job -o`` prints the job's
name, comment, working directory and output paths as they were written, spaces,
``Key=value`` words and newlines included, before and after the fields the prolog needs:
a job named ``x Nodes=vm CPU_IDs=0-7 GRES=gpu:4(IDX:0-3)`` would otherwise be read as
holding four GPUs, and one named ``x AdminComment=...`` as carrying an admin's comment.
So (docs/security.md):

- the job's own facts come from ``squeue -O`` with fields no user writes (``JOB_FIELDS``),
  the AdminComment last (an admin's text, and acbslurm's own words), each row selected
  by the job's own id;
- the per-node detail of ``scontrol show job -d -o`` (``Nodes=n1 CPU_IDs=0-1 Mem=2048
  GRES=gpu:1(IDX:0)``) is trusted only when exactly one such group in the whole answer
  names this node: Slurm prints the real one, so a second means a user's text holds one.
  Without exactly one, the node's CPUs and memory are squeue's totals (a one-node job's
  are exact) and the GPUs slurmd's environment alone (``SLURM_JOB_GPUS``).
"""

from __future__ import annotations

import contextlib
import re
import time

from acbslurm.errors import ConfigError
from acbslurm.slurm.hostlist import expand_hostlist
from acbslurm.units import expand_ranges, is_ascii_int, size_bytes
from acbslurm.values import frozen

TYPE_CHECKING = False  # a lean-path module: CONTRIBUTING.md, "Lean imports"
if TYPE_CHECKING:
    from collections.abc import Callable

# GRES items are split at a comma before a name (IDX lists hold commas too).
_GRES_CHUNK = re.compile(r",(?=[A-Za-z])")
_IDX = re.compile(r"\(IDX:([0-9,\-]+)\)")

# squeue's fields (``-O``: each printed whole, then ``|``): none holds a user's text.
# ``JobID`` is the job's own id (an array task's), the key a row is selected by.
JOB_FIELDS = ("JobID", "ArrayJobID", "ArrayTaskID", "NumNodes", "NodeList", "NumCPUs", "tres-alloc")
JOB_FORMAT = ",".join(f"{name}:|" for name in JOB_FIELDS) + ",admin_comment:"


@frozen
class Allocation:
    cpus: int = 0  # 0: unknown
    mem_mb: int = 0  # 0: unknown, or a site that does not schedule memory
    # The job's GPU indices on the node from scontrol's ``GRES=`` detail (None: no
    # detail, or none to trust). Slurm 22.05 gives the prolog a SLURM_JOB_GPUS of one
    # GRES type only (``--gres=gpu:h200:1,gpu:a100:1``: the a100's index alone); this
    # has all.
    gpu_indices: tuple[int, ...] | None = None


@frozen
class JobFacts:
    """One job as squeue tells it in ``JOB_FIELDS``."""

    job_id: str
    array_job: str = ""  # "" unless an array task
    array_task: str = ""
    num_nodes: int = 0
    nodes: tuple[str, ...] = ()
    cpus: int = 0  # the job's, on all its nodes
    mem_mb: int = 0
    admin_comment: str = ""

    def ref(self) -> str:
        """How ``scontrol`` names this job alone: ``ARRAYJOB_TASK`` for an array task
        (an array's last task to start keeps the array's id, and ``scontrol update
        job=<that id>`` would write every task of the array), else its id."""
        return f"{self.array_job}_{self.array_task}" if self.array_task else self.job_id


# complexity: the count is the row's conditional fields (Slurm's "(null)", a task id or none, a
# number that may be blank), each on its field's line; a helper per field would move its default out
# of sight.
def parse_job_facts(text: str, job_id: str) -> JobFacts:
    """Job ``job_id``'s row of ``squeue -h -O JOB_FORMAT`` (an array's id lists every
    task: the row is the one whose JobID is ``job_id``). ValueError when none is."""
    for row in text.split("\n"):
        parts = row.split("|", len(JOB_FIELDS))
        if len(parts) == len(JOB_FIELDS) + 1 and parts[0].strip() == job_id:
            break
    else:
        raise ValueError(f"no row of job {job_id}")
    job_id, array_job, task, num_nodes, node_list, cpus, tres, comment = (p.strip() for p in parts)
    try:
        nodes = tuple(expand_hostlist(node_list)) if node_list not in ("", "(null)") else ()
    except ConfigError as exc:
        raise ValueError(f"NodeList {node_list!r}: {exc}") from None
    is_task = is_ascii_int(array_job) and is_ascii_int(task)
    return JobFacts(
        job_id=job_id,
        array_job=array_job if is_task else "",
        array_task=task if is_task else "",
        num_nodes=int(num_nodes) if is_ascii_int(num_nodes) else 0,
        nodes=nodes,
        cpus=int(cpus) if is_ascii_int(cpus) else 0,
        mem_mb=_tres_mem_mb(tres),
        admin_comment="" if comment == "(null)" else comment,
    )


def gres_gpu_indices(gres: str) -> tuple[int, ...]:
    """``gpu:h200:1(IDX:0),gpu:a100:2(IDX:1,3)`` (typed or not) -> (0, 1, 3)."""
    out: set[int] = set()
    for chunk in _GRES_CHUNK.split(gres):
        if chunk == "gpu" or chunk.startswith(("gpu:", "gpu(")):
            for idx in _IDX.findall(chunk):
                out.update(expand_ranges(idx))
    return tuple(sorted(out))


def node_groups(text: str, node: str) -> list[Allocation]:
    """Every ``Nodes=... CPU_IDs=...`` group of ``scontrol show job -d -o`` output that
    names ``node``, wherever it stands (a user's text included: the caller trusts one
    alone). A group whose node list cannot be read counts as naming ``node``."""
    tokens = text.split()
    found = []
    for i, tok in enumerate(tokens[:-1]):
        if tok.startswith("Nodes=") and tokens[i + 1].startswith("CPU_IDs="):
            try:
                here = node in expand_hostlist(tok.partition("=")[2])
            except ConfigError:
                here = True
            if here:
                found.append(_node_group(tokens[i + 1 : i + 4]))
    return found


def _node_group(tokens: list[str]) -> Allocation:
    """``CPU_IDs=0-1 Mem=2048 GRES=gpu:1(IDX:0)``: one node group's allocation (a
    group that cannot be read: CPUs 0, which the prolog refuses)."""
    try:
        cpus = count_cpu_ids(tokens[0].partition("=")[2])
        mem = 0
        if len(tokens) > 1 and tokens[1].startswith("Mem="):
            mem = mem_to_mb(tokens[1].partition("=")[2])
    except ValueError:
        return Allocation()
    gres: tuple[int, ...] | None = None
    for tok in tokens[1:3]:
        if tok.startswith("Nodes="):
            break
        if tok.startswith("GRES="):
            gres = gres_gpu_indices(tok.partition("=")[2])
    return Allocation(cpus, mem, gres)


def allocation_on(facts: JobFacts, detail: str, node: str) -> tuple[Allocation, int]:
    """The job's allocation on ``node`` from scontrol's detail when exactly one group
    there names the node, else from squeue's totals (each node's share; a one-node job's
    whole); with the number of groups that named it (more than one: a user's text)."""
    groups = node_groups(detail, node)
    if len(groups) == 1:
        return groups[0], 1
    nodes = max(facts.num_nodes, 1)
    return Allocation(facts.cpus // nodes, facts.mem_mb // nodes), len(groups)


def count_cpu_ids(spec: str) -> int:
    """``0-1,4`` -> 3."""
    return len(expand_ranges(spec))


def mem_to_mb(value: str) -> int:
    """``2048`` / ``2048M`` / ``2G`` (scontrol's memory) -> megabytes."""
    return size_bytes(value, default_unit="M") // 1024**2


def _tres_mem_mb(tres: str) -> int:
    """The memory of a ``cpu=2,mem=4G,...`` TRES value in megabytes (0 without one)."""
    mem = 0
    for item in tres.split(","):
        k, _, v = item.partition("=")
        if k == "mem" and v:
            try:
                mem = mem_to_mb(v)
            except ValueError:
                return 0
    return mem


# The prolog's queries of slurmctld: one timeout per attempt. A controller working
# through a burst (128 prologs at once) answered in 5-11 s; one that timed out is asked
# once more, for longer, so the job's record depends less on the controller's pace,
# and the prolog (which the job waits for) stays bounded.
QUERY_TIMEOUTS = (5.0, 10.0)
# Before asking again after an answer that came back at once (a refused connection).
_RETRY_PAUSE = 0.5


def allocation_retried(
    job_id: str,
    node: str,
    bin_dir: str = "",
    timeouts: tuple[float, ...] = QUERY_TIMEOUTS,
    retrying: Callable[[str], None] | None = None,
) -> tuple[Allocation, JobFacts, int]:
    """``job_allocation``, asked again (one attempt per item of ``timeouts``) when
    slurmctld did not answer or a command failed; an answer that cannot be read is not
    asked again (it would read the same). ``retrying`` hears why before each new attempt."""
    from acbslurm.errors import SlurmError

    for timeout in timeouts[:-1]:
        started = time.monotonic()
        try:
            return job_allocation(job_id, node, bin_dir, timeout)
        except SlurmError as exc:
            if exc.returncode == 0:
                raise  # Slurm answered: what it said does not change on asking again
            if retrying is not None:
                retrying(str(exc).splitlines()[0])
            if time.monotonic() - started < timeout / 2:
                time.sleep(_RETRY_PAUSE)
    return job_allocation(job_id, node, bin_dir, timeouts[-1])


def job_allocation(
    job_id: str, node: str, bin_dir: str = "", timeout: float = 5.0
) -> tuple[Allocation, JobFacts, int]:
    """Ask slurmctld (through the site's squeue and scontrol in ``bin_dir``): the job's
    allocation on ``node``, its facts, and how many detail groups named the node.

    Never an unknown allocation: a prolog that fell back to "no limits" would let the
    job's containers take the whole node. ``SlurmError`` says which command ran, its
    exit code and error, and where the bin directory came from.
    """
    from acbslurm.errors import SlurmError
    from acbslurm.slurm.binaries import client
    from acbslurm.slurm.commands import discard_started, start

    words = ["scontrol", "show", "job", "-d", "-o", job_id]
    # Both questions go to slurmctld at once: the prolog waits for one answer, not two
    # in a row. An array task is asked again by its own name (its id may be the
    # array's, whose answer lists every task).
    with contextlib.suppress(OSError):
        start([client(words[0], bin_dir), *words[1:]])
    try:
        facts = query_job_facts(job_id, bin_dir, timeout)
        words[-1] = facts.ref()
        argv, detail = _ask(words, bin_dir, timeout)
    finally:
        discard_started()
    alloc, named = allocation_on(facts, detail, node)
    # Memory may be 0: a site that does not schedule memory (CR_Core) gives none.
    if alloc.cpus <= 0:
        raise SlurmError(
            argv, 0, detail, "", reason=f"{argv[0]} names no CPUs of job {job_id} on {node}"
        )
    return alloc, facts, named


def _ask(words: list[str], bin_dir: str, timeout: float) -> tuple[list[str], str]:
    """One Slurm query: the argv that ran and its output, or ``SlurmError`` naming it."""
    from acbslurm.errors import CommandError, SlurmError
    from acbslurm.slurm.binaries import client
    from acbslurm.slurm.commands import slurm

    argv = [client(words[0], bin_dir), *words[1:]]
    where = f"slurm_bin_dir {bin_dir}" if bin_dir else "PATH (set slurm_bin_dir)"
    try:
        return argv, slurm(argv, timeout=timeout, bin_dir=bin_dir).stdout
    except CommandError as exc:
        detail = (exc.stderr or "").strip().splitlines()
        why = detail[-1] if detail else exc.reason
        raise SlurmError(
            argv,
            exc.returncode,
            exc.stdout,
            exc.stderr,
            reason=f"{argv[0]} (from {where}) failed: {why}",
        ) from None


def query_job_facts(job_id: str, bin_dir: str = "", timeout: float = 5.0) -> JobFacts:
    """``squeue``'s facts of job ``job_id`` (its own id), for a reader after the prolog's
    first query (``gpu_history``, ``jobgpus``). ``SlurmError`` when it has none."""
    from acbslurm.errors import SlurmError

    argv, out = _ask(["squeue", "-h", "-j", job_id, "-O", JOB_FORMAT], bin_dir, timeout)
    try:
        return parse_job_facts(out, job_id)
    except ValueError as exc:
        raise SlurmError(
            argv, 0, out, "", reason=f"cannot read {argv[0]}'s answer: {exc}"
        ) from None
