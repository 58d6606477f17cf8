#!/bin/bash
# Rendered by acbslurm from a job spec: edit the spec, not this script.
#SBATCH --job-name=options
#SBATCH --partition=p1
#SBATCH --qos=high
#SBATCH --constraint="a100&nvlink"
#SBATCH --reservation="maint window"
#SBATCH --exclusive
#SBATCH --mail-type=END,FAIL
#SBATCH --mail-user=user1@example.org
#SBATCH --signal=B:USR1@120
#SBATCH --no-requeue
#SBATCH --licenses=matlab:1
#SBATCH --comment="it's \"mine\""
#SBATCH --hold

# Each task's container gets exactly the GPUs Slurm gave its task (--gpus auto), and
# the job's env (--env NAME: the value exported above) but what its own env sets.
# --kill-on-bad-exit: one task that fails ends the others (and the job) at once.
exec srun --kill-on-bad-exit=1 /usr/local/bin/acbslurm run --gpus auto \
  --pull always \
  busybox:latest -- sh -c 'echo hi'
