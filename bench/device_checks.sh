#!/usr/bin/env bash
# Every real-GPU check of acbslurm in one run, for the GPU-check machine (see
# docs/admin-guide.md, "Real GPU check"). Fetch the wheels it lacks first, here:
# scripts/device_wheels.sh; then run this there with `.whl` carried.
#
#     bash bench/device_checks.sh [--smoke]     # --smoke: the CPU-sized plumbing check
#
# Results go to $OUT (else ./device-out): gpu_map.json, nvidia_smi.txt, broker_gpu.txt,
# serve_gpu.txt. The serve check needs ~36 GB of free disk where TMPDIR points (one
# model's weights) and the wheels of scripts/device_wheels.sh (starlette, uvicorn for
# its gateway phase); SERVE_GB=N and SERVE_GATEWAY_GB=N make its models smaller.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
py=${PYTHON:-python3}
out=${OUT:-device-out}
smoke=${1:-}
mkdir -p "$out"
# The carried wheels are built for the machine's Python 3.12 only.
if compgen -G ".whl/*.whl" >/dev/null &&
  "$py" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))'; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 3
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
rc=0
echo "== GPU index -> minor -> UUID through acbslurm's mapping"
"$py" bench/gpu_map_check.py --json >"$out/gpu_map.json"
map_rc=$?
cat "$out/gpu_map.json"
# 3 = no NVIDIA driver here: expected only for --smoke
if [ "$map_rc" -ne 0 ] && ! { [ "$smoke" = --smoke ] && [ "$map_rc" -eq 3 ]; }; then rc=1; fi
nvidia-smi -L >"$out/nvidia_smi.txt" 2>&1 || true
echo "== the broker: eviction bandwidth and four ~40 GB programs under agarun"
"$py" bench/broker_gpu_check.py $smoke 2>&1 | tee "$out/broker_gpu.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
echo "== serve: four ~35 GB models on one GPU: evicted model's restore and first token vs. a cold start"
serve_args=(--gb "${SERVE_GB:-35}" --gateway-gb "${SERVE_GATEWAY_GB:-16}")
[ "$smoke" = --smoke ] && serve_args=(--smoke)
"$py" bench/serve_gpu_check.py "${serve_args[@]}" 2>&1 | tee "$out/serve_gpu.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
echo "== device_checks: exit $rc (files in $out)"
exit $rc
