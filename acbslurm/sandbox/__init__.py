"""The local cluster: a real Slurm, MariaDB and rootless Docker on one machine."""

from acbslurm.sandbox.cluster import ComponentStatus, Sandbox

__all__ = ["ComponentStatus", "Sandbox"]
