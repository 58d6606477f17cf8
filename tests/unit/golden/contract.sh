#!/bin/bash
# Rendered by acbslurm from a job spec: edit the spec, not this script.
#SBATCH --job-name=contract
#SBATCH --ntasks=2
#SBATCH --mem=8G

export OMP_NUM_THREADS=8
export HF_HOME=/scratch/hf
export ACBSLURM_STOP_GRACE=60

# Each task's container gets exactly the GPUs Slurm gave its task (--gpus auto), and
# the job's env (--env NAME: the value exported above) but what its own env sets.
# --kill-on-bad-exit: one task that fails ends the others (and the job) at once.
exec srun --kill-on-bad-exit=1 /usr/local/bin/acbslurm run --gpus auto \
  --env OMP_NUM_THREADS \
  --env HF_HOME=/work/.hf \
  --env-file /scratch/user1/train.env \
  --env-file /scratch/user1/keys.env \
  --user 1000:50 \
  --entrypoint '' \
  --shm-size 2g \
  --read-only \
  --grace 30 \
  --ulimit memlock=-1 \
  --ulimit nofile=4096:8192 \
  --ulimit stack=unlimited \
  --publish 8888 \
  --publish 127.0.0.1:16006:6006 \
  --device /dev/infiniband/uverbs0 \
  --device /dev/infiniband/rdma_cm:/dev/infiniband/rdma_cm:rw \
  --network bridge \
  trainer:1 -- sh -c 'python train.py'
