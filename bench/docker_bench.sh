#!/bin/bash
# The hooks' and `acbslurm run`'s numbers on each Docker, one sandbox after another.
#
#   sudo bash bench/docker_bench.sh [ROUNDS] [DOCKER...]     (default: 2 rounds; 20.10 26.1 28.5)
#
# Per Docker: `sandbox up --docker V` in a directory of its own, then ROUNDS of
# hooks_bench.py (-n 20) and run_bench.py (-n $RUN_N, default 40) in turn, then down.
# Goals: prolog and epilog <= 100 ms each, run <= 1.15x docker run, on an idle machine:
# run it with nothing else running (each round prints the load). Ports from 7800
# (ACBSLURM_SANDBOX_PORT_BASE), so a sandbox of the default ports may stay up.
set -u
cd "$(dirname "$0")/.."
rounds=${1:-2}
shift || true
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(20.10 26.1 28.5)
export ACBSLURM_SANDBOX_PORT_BASE=${ACBSLURM_SANDBOX_PORT_BASE:-7800}
load() { cut -d' ' -f1-3 /proc/loadavg; }
for v in "${versions[@]}"; do
  dir=/var/lib/acbslurm/sb-bench-${v/./}
  echo "== Docker $v: sandbox up ($(date -u +%T))"
  if ! .venv/bin/acbslurm sandbox up --dir "$dir" --docker "$v" > "/tmp/docker_bench-up-$v.log" 2>&1; then
    echo "sandbox up failed: /tmp/docker_bench-up-$v.log"; tail -5 "/tmp/docker_bench-up-$v.log"; continue
  fi
  for r in $(seq "$rounds"); do
    echo "== $v hooks, round $r (load $(load))"
    .venv/bin/python bench/hooks_bench.py --dir "$dir" -n 20 2>&1 | grep -v "^acbslurm-prolog: info"
    echo "== $v run, round $r (load $(load))"
    .venv/bin/python bench/run_bench.py --dir "$dir" -n "${RUN_N:-40}" 2>&1 | grep -v "warning: this Docker"
  done
  .venv/bin/acbslurm sandbox down --dir "$dir" > /dev/null 2>&1
done
