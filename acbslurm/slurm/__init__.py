"""The only place that talks to Slurm (CLI backend by default, pyslurm optional)."""
