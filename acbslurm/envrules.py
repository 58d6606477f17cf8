"""Which variables a job may set in its container: none that choose GPUs.

The NVIDIA container toolkit reads ``NVIDIA_*`` variables of the container to decide
which devices and driver parts it exposes. ``NVIDIA_VISIBLE_DEVICES=all`` (or a MIG or
IMEX setting) would hand the container GPUs Slurm did not give the job, so only the
variables that narrow what the toolkit does are allowed: ``NVIDIA_DRIVER_CAPABILITIES``
(which driver libraries are mounted, for the devices already chosen) and the
``NVIDIA_REQUIRE_*``/``NVIDIA_DISABLE_REQUIRE`` checks. GPUs come only from ``--gpus``
(`acbslurm run`) or ``gpus`` (a job spec). ``CUDA_VISIBLE_DEVICES`` only narrows what
CUDA shows inside the container, so it stays free.

``ACBSLURM_*`` variables are acbslurm's own: the launcher sets ``ACBSLURM_JOB_ID`` and
``ACBSLURM_GPU_UUIDS`` in every container, and the daemon-less epilog finds a job's
processes by ``ACBSLURM_JOB_ID=<job>`` in their environment (``hooks/orphans.py``). A
user who set one could hide a container from its job's cleanup or point another job's
cleanup at it, so none of them may come from a user for a container. A job's own
environment (a spec's top-level ``env``, the job script's ``export`` lines) is the user's
anyway: there only the names acbslurm sets for the job are refused, so that settings
such as ``ACBSLURM_SERVE_RENDEZVOUS_HOST`` or ``ACBSLURM_STOP_GRACE`` still pass. A
container job passes its ``env`` on to the container by name, every name but the
``ACBSLURM_*`` ones (``JobSpec.container_env_names``), and `acbslurm run` checks each
again.
"""

from __future__ import annotations

SAFE_NVIDIA = ("NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_DISABLE_REQUIRE")
# What the task prolog and the launcher set for a job: never the user's to choose.
JOB_SET = ("ACBSLURM_JOB_ID", "ACBSLURM_GPU_UUIDS")


def env_problem(name: str, *, container: bool = True) -> str | None:
    """Why ``name`` may not be set in a job's container (or, with ``container=False``,
    in the job's own environment), or None."""
    if name.upper() in JOB_SET or (container and name.upper().startswith("ACBSLURM_")):
        return (
            f"{name} is refused: ACBSLURM_* variables are set by acbslurm itself (the job "
            "id and GPUs its cleanup finds the container by)"
        )
    if not name.upper().startswith("NVIDIA_"):
        return None
    if name in SAFE_NVIDIA or name.startswith("NVIDIA_REQUIRE_"):
        return None
    return (
        f"{name} is refused: NVIDIA_* variables choose which GPUs the container gets, and "
        "those come only from Slurm (allowed: NVIDIA_DRIVER_CAPABILITIES, "
        "NVIDIA_REQUIRE_*, NVIDIA_DISABLE_REQUIRE)"
    )
