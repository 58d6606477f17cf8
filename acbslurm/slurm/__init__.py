"""The only place that talks to Slurm: its command-line tools, through `commands.slurm()`."""
