#!/usr/bin/env bash
# Regenerate the broker's gRPC code from acbslurm/broker/broker.proto.
# Usage: scripts/gen_proto.sh [OUT_DIR]   (default: acbslurm/broker/_generated)
# PYTHON selects the interpreter (default: python3); it needs grpcio-tools, pinned in
# setup.cfg's dev extras so that the committed code is reproduced byte for byte.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$root/acbslurm/broker/_generated}
python=${PYTHON:-python3}
mkdir -p "$out"
cd "$root"
# -I. with the package path keeps the generated import "acbslurm.broker" absolute.
"$python" -m grpc_tools.protoc -I. \
  --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" \
  acbslurm/broker/broker.proto
# protoc mirrors the source path under OUT; flatten it into OUT itself.
gen="$out/acbslurm/broker"
for f in broker_pb2.py broker_pb2.pyi broker_pb2_grpc.py; do
  mv "$gen/$f" "$out/$f"
done
rm -rf "$out/acbslurm"
# The gRPC module imports its messages by the proto's path; point it at this package.
sed -i 's/^from acbslurm\.broker import broker_pb2 as/from acbslurm.broker._generated import broker_pb2 as/' \
  "$out/broker_pb2_grpc.py"
touch "$out/__init__.py"
