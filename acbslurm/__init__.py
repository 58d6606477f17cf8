"""acbslurm: Slurm-integrated GPU container jobs, accounting reports and a GPU broker."""

__version__ = "0.1.0"
