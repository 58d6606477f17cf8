#!/bin/bash
# Rendered by acbslurm from a job spec: edit the spec, not this script.
#SBATCH --job-name=openai-whisper
#SBATCH --partition=p1
#SBATCH --account=user1
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=2
#SBATCH --mem=2G
#SBATCH --gres=gpu:1
#SBATCH --output=openai-whisper.out
#SBATCH --error=openai-whisper.err

# Each task's container gets exactly the GPUs Slurm gave its task (--gpus auto), and
# the job's env (--env NAME: the value exported above) but what its own env sets.
# --kill-on-bad-exit: one task that fails ends the others (and the job) at once.
exec srun --kill-on-bad-exit=1 /usr/local/bin/acbslurm run --gpus auto \
  --mount /home/user1:/home/user1 \
  --workdir /home/user1 \
  openai-whisper:latest -- whisper --model turbo --device cuda --language Japanese --model_dir /home/user1/openai-whisper /home/user1/Gmjrwl_D72E.wav
