#!/bin/bash
# Rendered by acbslurm from a job spec: edit the spec, not this script.
#SBATCH --job-name=no-container
#SBATCH --partition=p1
#SBATCH --time=30

exec bash -c 'hostname; nvidia-smi -L || true'
