#!/usr/bin/env bash
# Run the whole test suite: installs and builds first (scripts/setup.sh), then CTest and the
# Python tests (pytest tests/python, on the installed package; PAGEDATTN_PYTHON=OFF skips them).
# GPU tests (label "cuda", and the Python tests that need CUDA) skip themselves on machines
# without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
build_dir="${BUILD_DIR:-build}"
ctest --test-dir "$build_dir" --output-on-failure -j "${JOBS:-$(nproc)}" --timeout 900
if [ "${PAGEDATTN_PYTHON:-ON}" != OFF ]; then
  "${PYTHON:-python3}" -m pytest tests/python -q
fi
