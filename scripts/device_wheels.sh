#!/usr/bin/env bash
# Fetch the wheels the GPU-check machine lacks into .whl/ (ignored by git; carried to
# the machine by the device tool). The broker's generated code needs a protobuf runtime
# at least as new as the one that generated it, and grpcio likewise; the machine's
# Python is 3.12. starlette and uvicorn (pure Python) are the serve gateway's, which
# that machine lacks (bench/serve_gpu_check.py). The versions are the ones this
# checkout's .venv runs.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
py=${PYTHON:-.venv/bin/python}
mkdir -p .whl
for pkg in grpcio protobuf starlette uvicorn; do
  ver=$("$py" -c "import importlib.metadata as m; print(m.version('$pkg'))")
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 -d .whl "$pkg==$ver"
done
ls -l .whl
