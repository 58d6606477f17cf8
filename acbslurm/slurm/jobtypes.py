"""What a job query or a submission gives back: plain records and the helpers that read
their fields, apart from ``jobs`` so that ``pyslurm_backend`` (which ``jobs`` calls)
can build them without importing ``jobs`` back."""

from __future__ import annotations

import functools
from datetime import datetime
from typing import TYPE_CHECKING

from acbslurm.errors import SlurmError
from acbslurm.gpuvalue import Gpu
from acbslurm.slurm.states import TERMINAL_STATES
from acbslurm.units import is_ascii_int, time_limit_seconds
from acbslurm.values import field, frozen, mutable

if TYPE_CHECKING:
    from typing import Any


@mutable
class JobInfo:
    job_id: str
    state: str
    name: str = ""
    user: str = ""
    reason: str = ""
    elapsed: str = ""
    node: str = ""
    submit_time: str = ""
    start_time: str = ""
    end_time: str = ""
    exit_code: str = ""  # Slurm's CODE:SIGNAL
    partition: str = ""
    # Its GPUs, each with its node and Slurm's index there, and the UUID its node's
    # prolog recorded ("" where this host cannot read it yet).
    gpus: list[Gpu] = field(default_factory=list)
    # Set on the task rows (12_1, 12_[2-3]) an array's own id (12) was expanded to.
    array_job_id: str = ""
    # The job's working directory as the controller has it ("" where not asked: sacct's
    # rows); where a running job keeps its pool's address and its published ports.
    work_dir: str = ""

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def failed(self) -> bool:
        return self.finished and self.state != "COMPLETED"

    @property
    def gpu_indices(self) -> list[int]:
        """Slurm's indices of its GPUs, of all its nodes together."""
        return gpu_indices(self.gpus)

    @property
    def gpu_uuids(self) -> list[str]:
        return [g.uuid for g in self.gpus if g.uuid]

    @property
    def gpu_devices(self) -> list[Gpu]:
        """Its GPUs when they are on several nodes (empty on one: the indices say it)."""
        return list(self.gpus) if len({g.node for g in self.gpus}) > 1 else []

    def as_json(self) -> dict[str, Any]:
        """The JSON style of every command (docs/cli.md): null for what is not known,
        ISO-8601 times with the local offset, durations in seconds (``elapsed_s``)."""
        code, sig = exit_status(self.exit_code)
        return {
            "job_id": self.job_id,
            "array_job_id": self.array_job_id or None,
            "name": self.name or None,
            "user": self.user or None,
            "partition": self.partition or None,
            "state": self.state,
            "reason": self.reason or None,
            "exit_code": code,
            "signal": sig,
            "node": self.node or None,
            "elapsed_s": elapsed_seconds(self.elapsed),
            "submit": iso_local(self.submit_time),
            "start": iso_local(self.start_time),
            "end": iso_local(self.end_time),
            "gpu_indices": self.gpu_indices,
            "gpu_uuids": self.gpu_uuids,
            "gpu_devices": [
                {"node": g.node, "index": g.index, "uuid": g.uuid or None} for g in self.gpu_devices
            ],
        }


def gpu_indices(gpus: list[Gpu]) -> list[int]:
    return sorted({g.index for g in gpus if g.index is not None})


def exit_status(text: str) -> tuple[int | None, int | None]:
    """Slurm's ``CODE:SIGNAL`` as two integers; None for what it does not say."""
    code, _, sig = text.partition(":")
    return (
        int(code) if is_ascii_int(code.strip()) else None,
        int(sig) if is_ascii_int(sig.strip()) else None,
    )


# Cached: a queue's rows repeat the same few texts (every held job's 0:00, a burst's
# submit second), and each parse was most of `status --json`'s time per job.
@functools.lru_cache(maxsize=4096)
def elapsed_seconds(text: str) -> int | None:
    """squeue's and sacct's elapsed time (``M:SS``, ``H:MM:SS``, ``D-HH:MM:SS``) in seconds."""
    if not text or text in ("INVALID", "UNLIMITED"):
        return None
    try:
        return time_limit_seconds(text)
    except ValueError:
        return None


@functools.lru_cache(maxsize=4096)
def iso_local(text: str) -> str | None:
    """A Slurm time (``2024-05-01T10:00:00``, the host's local time) with its offset."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text).astimezone().isoformat(timespec="seconds")
    except ValueError:
        return None


@frozen
class JobGres:
    """One job of ``scontrol -d -o show job``: its own JobId and GPUs."""

    job_id: str  # the JobId: an array task's own id, the name of its record file
    # Each node's, with Slurm's index there (node "" where scontrol named no node) and
    # the UUID the node's prolog wrote into the job's AdminComment ("" before that).
    gpus: list[Gpu] = field(default_factory=list)
    # scontrol's JobState when asked (later than squeue's row); empty when not known
    # (pyslurm's rows come with their own state).
    state: str = ""

    @property
    def indices(self) -> list[int]:
        """Slurm's indices of its GPUs, of all its nodes together."""
        return gpu_indices(self.gpus)


@mutable
class SubmitResult:
    job_ids: list[str]
    error: SlurmError | None = None  # the first failure
    failed: int = 0  # sbatch calls that failed
    requested: int = 1

    @property
    def not_attempted(self) -> int:
        """Submissions never started because an earlier one failed."""
        return self.requested - len(self.job_ids) - self.failed

    @property
    def partial(self) -> bool:
        return self.error is not None and bool(self.job_ids)
