"""Which variables a job may set in its container: none that choose GPUs.

The NVIDIA container toolkit reads ``NVIDIA_*`` variables of the container to decide
which devices and driver parts it exposes. ``NVIDIA_VISIBLE_DEVICES=all`` (or a MIG or
IMEX setting) would hand the container GPUs Slurm did not give the job, so only the
variables that narrow what the toolkit does are allowed: ``NVIDIA_DRIVER_CAPABILITIES``
(which driver libraries are mounted, for the devices already chosen) and the
``NVIDIA_REQUIRE_*``/``NVIDIA_DISABLE_REQUIRE`` checks. GPUs come only from ``--gpus``
(`acbslurm run`) or ``gpus`` (a job spec). ``CUDA_VISIBLE_DEVICES`` only narrows what
CUDA shows inside the container, so it stays free.
"""

from __future__ import annotations

SAFE_NVIDIA = ("NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_DISABLE_REQUIRE")


def env_problem(name: str) -> str | None:
    """Why ``name`` may not be set in a job's container, or None."""
    if not name.upper().startswith("NVIDIA_"):
        return None
    if name in SAFE_NVIDIA or name.startswith("NVIDIA_REQUIRE_"):
        return None
    return (
        f"{name} is refused: NVIDIA_* variables choose which GPUs the container gets, and "
        "those come only from Slurm (allowed: NVIDIA_DRIVER_CAPABILITIES, "
        "NVIDIA_REQUIRE_*, NVIDIA_DISABLE_REQUIRE)"
    )
