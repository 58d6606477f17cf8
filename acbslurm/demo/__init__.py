"""The GPU-queue experiment on the sandbox (`acbslurm demo`): demo code, not a Slurm adapter."""
