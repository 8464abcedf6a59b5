#!/usr/bin/env bash
# Install what pagedattn needs on a fresh Debian/Ubuntu machine, then configure and build it
# (Release, into ./build). The CUDA backend is built when nvcc is found (PATH or
# /usr/local/cuda); set PAGEDATTN_CUDA=OFF to skip it. The build folder keeps that choice on later
# runs (scripts/test.sh included) until PAGEDATTN_CUDA is set again (AUTO, ON or OFF).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake ninja-build g++ libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev
          nlohmann-json3-dev libfmt-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# scripts/vendor_deps.sh needs the packages only.
if [ "${PAGEDATTN_INSTALL_ONLY:-0}" = 1 ]; then exit 0; fi

build_dir="${BUILD_DIR:-build}"
jobs="${JOBS:-$(nproc)}"
# Only an explicit PAGEDATTN_CUDA overrides the build folder's setting: scripts/test.sh runs this
# script again, and a folder configured with PAGEDATTN_CUDA=OFF must stay CPU-only (CMake's
# default for a new folder is AUTO).
cuda_flag=()
if [ -n "${PAGEDATTN_CUDA+x}" ]; then cuda_flag=(-DPAGEDATTN_CUDA="$PAGEDATTN_CUDA"); fi
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda_flag[@]}"
cmake --build "$build_dir" -j "$jobs"
echo "setup: built $build_dir/pagedattn"
