"""Drain a node with a reason: the epilog's answer to GPUs it could not free.

A module of its own because the epilog imports it: only ``commands`` (which the hooks
already load for the allocation), none of the slow modules the hooks must not import
(tests/unit/hooks/test_hooks_imports.py).
"""

from __future__ import annotations

from acbslurm.slurm.commands import slurm


def drain_node(node: str, reason: str, *, timeout: float = 5.0, bin_dir: str = "") -> None:
    """``scontrol update nodename=NODE state=drain reason=REASON``; ``CommandError`` when
    it fails (Slurm drains a node whose epilog failed anyway, with a vaguer reason)."""
    argv = ["scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}"]
    slurm(argv, timeout=timeout, bin_dir=bin_dir)
