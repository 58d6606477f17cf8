#!/bin/bash
# Rendered by acbslurm from a job spec: edit the spec, not this script.
#SBATCH --job-name=per-task
#SBATCH --ntasks=2
#SBATCH --gpus-per-task=1

# Each task's container gets exactly the GPUs Slurm gave its task (--gpus auto), and
# the job's env (--env NAME: the value exported above) but what its own env sets.
# --kill-on-bad-exit: one task that fails ends the others (and the job) at once.
exec srun --kill-on-bad-exit=1 /usr/local/bin/acbslurm run --gpus auto \
  acbslurm/busybox:latest -- sh -c 'echo "rank $SLURM_PROCID: $ACBSLURM_GPU_UUIDS"'
