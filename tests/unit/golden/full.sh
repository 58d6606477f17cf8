#!/bin/bash
# Rendered by acbslurm from a job spec: edit the spec, not this script.
#SBATCH --job-name=every-key
#SBATCH --partition=p1
#SBATCH --account=user1
#SBATCH --nodes=1-2
#SBATCH --ntasks=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=4
#SBATCH --mem=16G
#SBATCH --gres=gpu:a100:2
#SBATCH --time=1-00:00:00
#SBATCH --output=/scratch/%u/%j.out
#SBATCH --error=/scratch/%u/%j.err
#SBATCH --array=0-9%2
#SBATCH --dependency=afterok:41
#SBATCH --chdir=/scratch/user1

export OMP_NUM_THREADS=4
export GREETING='hello world'

# Each task's container gets exactly the GPUs Slurm gave its task (--gpus auto), and
# the job's env (--env NAME: the value exported above) but what its own env sets.
# --kill-on-bad-exit: one task that fails ends the others (and the job) at once.
exec srun --kill-on-bad-exit=1 /usr/local/bin/acbslurm run --gpus auto \
  --mount /data:/data:ro \
  --mount /scratch/user1:/work \
  --env OMP_NUM_THREADS \
  --env GREETING \
  --env HF_HOME=/work/.hf \
  --workdir /work \
  registry.example/team/train:1.2 -- python train.py --epochs 3
