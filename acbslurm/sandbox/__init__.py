"""The local cluster: a real Slurm, MariaDB and rootless Docker on one machine."""
