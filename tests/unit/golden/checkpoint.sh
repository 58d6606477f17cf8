#!/bin/bash
# Rendered by acbslurm from a job spec: edit the spec, not this script.
#SBATCH --job-name=checkpoint
#SBATCH --partition=p1
#SBATCH --gres=gpu:1
#SBATCH --time=10:00
#SBATCH --output=checkpoint-%j.out
#SBATCH --signal=USR1@120
#SBATCH --requeue
#SBATCH --open-mode=append

# Each task's container gets exactly the GPUs Slurm gave its task (--gpus auto), and
# the job's env (--env NAME: the value exported above) but what its own env sets.
# --kill-on-bad-exit: one task that fails ends the others (and the job) at once.
exec srun --kill-on-bad-exit=1 /usr/local/bin/acbslurm run --gpus auto \
  --mount /scratch/user1/ckpt:/ckpt \
  --requeue-exit 85 \
  acbslurm/busybox:latest -- sh -c 'step=$(cat /ckpt/state 2>/dev/null || echo 0)
echo "run ${SLURM_RESTART_COUNT:-0} from step $step"
trap '"'"'echo "$step" > /ckpt/state; echo "saved at step $step"; exit 85'"'"' USR1
while [ "$step" -lt 1000 ]; do step=$((step + 1)); sleep 1; done
echo "done at step $step"
'
