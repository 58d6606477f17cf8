"""Suspend without a cgroup freezer: SIGSTOP and SIGCONT to the container's processes.

A rootless daemon on cgroup v1 runs containers without cgroups (``CgroupDriver:
none``), so ``POST /containers/{id}/pause`` fails. The container's processes are
still host processes, descendants of its first one (docker-init), and those running
as the container's root are the job user's own: this process may stop them as
slurmstepd stops the step's. Processes of other users inside the container (subuids)
cannot be signalled; they are counted, and said.
"""

from __future__ import annotations

import os
import signal

from acbslurm.procfs import parent_pid, read_bytes
from acbslurm.units import is_ascii_int


def descendants(root: int, proc: str = "/proc") -> list[int]:
    """``root`` and every process below it, parents before children."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir(proc):
        if is_ascii_int(entry):
            ppid = parent_pid(read_bytes(f"{proc}/{entry}/stat"))
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop(0)
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def signal_tree(root: int, signum: int) -> tuple[list[int], int]:
    """``signum`` to ``root``'s tree: (the pids that took it, how many refused it)."""
    took: list[int] = []
    refused = 0
    for pid in descendants(root):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            continue  # ended meanwhile
        except PermissionError:
            refused += 1
            continue
        took.append(pid)
    return took, refused


def resume(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGCONT)
        except (ProcessLookupError, PermissionError):
            continue
