"""One GPU Slurm gave a job, as every part of acbslurm names it.

The prolog maps Slurm's allocation to these (gpu/mapping.py) and keeps them in the job
record; `acbslurm run` narrows them to a step's (gpu/steps.py) and gives Docker their
UUIDs, or their indices where a CDI spec names GPUs by index only; `acbslurm gpus`,
`status` and the report show them; a pool's broker lends those of every node of its job.
One value, so that a GPU's index, device minor and UUID never drift apart in parallel
lists.
"""

from __future__ import annotations

from acbslurm.values import frozen

TYPE_CHECKING = False  # a lean-path module: CONTRIBUTING.md, "Lean imports"
if TYPE_CHECKING:
    from collections.abc import Iterable


@frozen
class Gpu:
    """``uuid`` is what Docker and CUDA are given (``GPU-...``, or ``MIG-...``)."""

    uuid: str
    # Slurm's GRES index of the GPU on its node; None where Slurm named UUIDs only.
    index: int | None = None
    # The minor number of its /dev/nvidiaN (what the device cgroup and the fence use);
    # None where it is not known here (another node's GPU, read from the job's comment).
    minor: int | None = None
    node: str = ""

    def as_json(self) -> dict[str, int | str | None]:
        return {"node": self.node, "index": self.index, "minor": self.minor, "uuid": self.uuid}

    @classmethod
    def from_json(cls, data: object) -> Gpu:
        """The value ``as_json`` wrote; TypeError/ValueError/KeyError when it is not one."""
        if not isinstance(data, dict):
            raise TypeError(f"a GPU is an object, not {type(data).__name__}")
        uuid = data["uuid"]
        if not isinstance(uuid, str) or not uuid:
            raise ValueError(f"GPU uuid {uuid!r} is not a non-empty string")
        return cls(
            uuid=uuid,
            index=_int_or_none(data.get("index"), "index"),
            minor=_int_or_none(data.get("minor"), "minor"),
            node=str(data.get("node") or ""),
        )

    def token(self) -> str:
        """``node:index=uuid`` (``-`` for no index), as the job's comment and the
        report's devices write it."""
        return f"{self.node}:{'-' if self.index is None else self.index}={self.uuid}"


def _int_or_none(value: object, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"GPU {what} {value!r} is not a number")
    return value


def uuids(gpus: Iterable[Gpu]) -> list[str]:
    return [g.uuid for g in gpus]


def minors(gpus: Iterable[Gpu]) -> list[int]:
    """The device minors known of ``gpus`` (those without one left out)."""
    return [g.minor for g in gpus if g.minor is not None]


def from_lists(
    node: str, indices: list[int], uuid_list: list[str], minor_list: list[int]
) -> tuple[Gpu, ...]:
    """GPUs from the three parallel lists of a job record without a version (written
    before records had one): indices empty when Slurm named UUIDs, minors maybe fewer."""
    if indices and len(indices) != len(uuid_list):
        raise ValueError(f"{len(indices)} GPU indices for {len(uuid_list)} UUIDs")
    return tuple(
        Gpu(
            uuid=u,
            index=indices[i] if indices else None,
            minor=minor_list[i] if i < len(minor_list) else None,
            node=node,
        )
        for i, u in enumerate(uuid_list)
    )
