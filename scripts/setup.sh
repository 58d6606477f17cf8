#!/usr/bin/env bash
# One command for everything acbslurm needs on a Debian 12 machine (run as root):
# the Debian packages of the sandbox (Slurm, munge, MariaDB, Docker, rootless tools)
# and a virtual environment .venv with acbslurm and its dev/broker extras.
# Idempotent: a second run only checks.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

PACKAGES=(
  slurm-wlm slurmctld slurmd slurmdbd munge libslurm-dev
  mariadb-server mariadb-client libmariadb-dev pkg-config
  docker.io rootlesskit uidmap slirp4netns busybox-static
  debootstrap  # the multi-node tests' image with Python and torch (sandbox/torchimage.py)
  python3 python3-venv python3-dev gcc procps iproute2 passwd
  chromium  # tests render `report --format html` in a real headless browser
  docker-registry apache2-utils  # the sandbox's registry with a login (htpasswd -B)
  protobuf-compiler protobuf-compiler-grpc  # `make deb`: the broker's code for Debian's grpcio
)

if [ "$(id -u)" -ne 0 ]; then
  echo "setup: must run as root (it installs Debian packages): sudo $0" >&2
  exit 3
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  # policy-rc.d keeps the packages from starting system daemons: the sandbox runs its own.
  printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
  rm -f /usr/sbin/policy-rc.d
  trap - EXIT
fi

# Debian's python3 (3.11), not a per-user interpreter: job-side commands run as the
# job's user and must be able to execute the venv's python.
venv="$root/.venv"
if [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating $venv"
  /usr/bin/python3 -m venv "$venv"
fi
stamp="$venv/.acbslurm-installed"
want=$(cat setup.cfg pyproject.toml | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "setup: installing acbslurm[dev,broker,serve] into $venv"
  pip_args=(-q --disable-pip-version-check)
  [ -d /opt/wheels ] && pip_args+=(--find-links /opt/wheels)
  "$venv/bin/pip" install "${pip_args[@]}" --upgrade pip setuptools wheel >/dev/null
  # compat mode: a plain path entry instead of setuptools' import-hook finder, which
  # costs every acbslurm start (Slurm hooks included) about 14 ms.
  "$venv/bin/pip" install "${pip_args[@]}" -e ".[dev,broker,serve]" --config-settings editable_mode=compat
  echo "$want" >"$stamp"
fi

# vLLM for `engine: vllm` models, in .venv-vllm (scripts/setup_vllm.sh).
bash "$root/scripts/setup_vllm.sh"
echo "setup: ok ($venv/bin/acbslurm)"
