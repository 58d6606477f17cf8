#!/bin/bash
# Rendered by acbslurm from a job spec: edit the spec, not this script.
#SBATCH --job-name=total
#SBATCH --nodes=1-2
#SBATCH --gpus=h200:3

exec nvidia-smi -L
