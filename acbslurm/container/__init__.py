"""`acbslurm run`: the job's container in the user's rootless Docker."""
