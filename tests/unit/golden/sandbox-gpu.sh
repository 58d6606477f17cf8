#!/bin/bash
# Rendered by acbslurm from a job spec: edit the spec, not this script.
#SBATCH --job-name=sandbox-gpu
#SBATCH --partition=p1
#SBATCH --account=user1
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=2
#SBATCH --mem=500M
#SBATCH --gres=gpu:1
#SBATCH --time=10:00
#SBATCH --output=sandbox-gpu-%j.out

# Each task's container gets exactly the GPUs Slurm gave its task (--gpus auto), and
# the job's env (--env NAME: the value exported above) but what its own env sets.
# --kill-on-bad-exit: one task that fails ends the others (and the job) at once.
exec srun --kill-on-bad-exit=1 /usr/local/bin/acbslurm run --gpus auto \
  --env HOLD_SECONDS=15 \
  acbslurm/busybox:latest -- sh -c 'echo "GPU ${NVIDIA_VISIBLE_DEVICES:-none}"; sleep "$HOLD_SECONDS"'
