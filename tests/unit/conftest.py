"""Fixtures every unit test may use: a fake Docker daemon on a unix socket and fake
Slurm commands on PATH (each lives in its own module beside this file)."""

from fake_docker import fake_docker  # noqa: F401
from fake_slurm import fake_slurm  # noqa: F401
