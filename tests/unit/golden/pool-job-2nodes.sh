#!/bin/bash
# Rendered by acbslurm from a job spec: edit the spec, not this script.
#SBATCH --job-name=model-pool-2nodes
#SBATCH --partition=p1
#SBATCH --nodes=2
#SBATCH --cpus-per-task=16
#SBATCH --mem=200G
#SBATCH --gres=gpu:4
#SBATCH --time=8:00:00
#SBATCH --output=pool-%j.out

# A model pool (acbslurm serve) on exactly this job's GPUs. Once its workers are up,
# the gateway's address is in acbslurm-serve-$SLURM_JOB_ID.json in the job's working
# directory (readable by the job's user only); `acbslurm status` shows it.
exec /usr/local/bin/acbslurm serve <repo>/conf/examples/pool-4-4-8.yaml \
  --listen 0.0.0.0:auto \
  --address-file "acbslurm-serve-$SLURM_JOB_ID.json"
