"""Slurm's job states: the names its commands print, the integers slurmdbd stores."""

from __future__ import annotations

BASE_NAMES = (
    "PENDING",
    "RUNNING",
    "SUSPENDED",
    "COMPLETED",
    "CANCELLED",
    "FAILED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "OUT_OF_MEMORY",
)
# States a job never leaves (squeue -t all, sacct); REVOKED and SPECIAL_EXIT included.
TERMINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "OUT_OF_MEMORY",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "REVOKED",
        "SPECIAL_EXIT",
    }
)
# States in which a job holds its allocation (its GPUs): scontrol shows their indices.
HOLDING_STATES = frozenset({"RUNNING", "COMPLETING", "SUSPENDED"})
# squeue's states for jobs that still hold (or wait for) resources.
LIVE_STATES = (
    "PENDING",
    "RUNNING",
    "SUSPENDED",
    "COMPLETING",
    "CONFIGURING",
    "REQUEUED",
    "RESIZING",
    "SIGNALING",
)
JOB_STATE_BASE = 0xFF
JOB_REQUEUE = 0x400  # row closed because the job was requeued
JOB_RESIZING = 0x2000  # row closed because the job was resized
JOB_REVOKED = 0x800000  # federated sibling that never ran here; sacct hides it

# sacct's short codes, accepted by --state.
SHORT = {
    "PD": "PENDING",
    "R": "RUNNING",
    "S": "SUSPENDED",
    "CD": "COMPLETED",
    "CA": "CANCELLED",
    "F": "FAILED",
    "TO": "TIMEOUT",
    "NF": "NODE_FAIL",
    "PR": "PREEMPTED",
    "BF": "BOOT_FAIL",
    "DL": "DEADLINE",
    "OOM": "OUT_OF_MEMORY",
    "RQ": "REQUEUED",
    "RS": "RESIZING",
}
ALL_NAMES = (*BASE_NAMES, "REQUEUED", "RESIZING")


def state_name(state: int) -> str:
    if state & JOB_REQUEUE:
        return "REQUEUED"
    if state & JOB_RESIZING:
        return "RESIZING"
    if state & JOB_REVOKED:
        return "REVOKED"
    base = state & JOB_STATE_BASE
    return BASE_NAMES[base] if base < len(BASE_NAMES) else f"UNKNOWN({state})"


def normalize_state(text: str) -> str:
    """A --state value as a state name, or ValueError naming the accepted ones."""
    up = text.strip().upper()
    if up in SHORT:
        return SHORT[up]
    if up == "COMPLETE":
        return "COMPLETED"
    if up in ALL_NAMES:
        return up
    raise ValueError(f"unknown job state {text!r} (one of {', '.join(ALL_NAMES)} or sacct codes)")
