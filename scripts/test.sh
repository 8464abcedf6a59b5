#!/usr/bin/env bash
# Run the whole test suite: installs and builds first (scripts/setup.sh), then CTest.
# GPU tests (label "cuda") skip themselves on machines without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
build_dir="${BUILD_DIR:-build}"
ctest --test-dir "$build_dir" --output-on-failure -j "${JOBS:-$(nproc)}" --timeout 900
