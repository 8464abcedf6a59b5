#!/usr/bin/env bash
# Fetch the peer libraries of bench/peers (issue 22) from PyPI into .peers/ (git-ignored; no
# peer code is committed) and stage what the GPU machine, which has no network, needs into
# .peers/carry (see bench/peers/README.md):
#
#   bash bench/peers/fetch_peers.sh [--host] [--aot FILE.tar.xz]... [--no-jit-sources]
#
#   --host            also install the payload for this machine's python3 into
#                     .peers/host_site (CPU-side tests: `import flashinfer` works without a GPU)
#   --aot FILE        FlashInfer modules built earlier (run_peers.py --prebuild-flashinfer
#                     wrote FILE, a .tar.xz of flashinfer/data/aot/<module>/<module>.so):
#                     carried, so that the GPU run loads them instead of compiling them
#   --no-jit-sources  leave FlashInfer's kernel sources out (only when --aot covers every
#                     module the run needs): about 4 MB less to carry
#
# Versions (environment): FLASHINFER_VERSION (0.7.2.post1: the version issues 21 and 23
# measured, and it supports torch 2.11 + CUDA 13 on sm_90), VLLM_VERSION (0.26.0: the newest
# vLLM that pins torch 2.11, the GPU machine's torch and Triton 3.6), TVM_FFI_VERSION
# (FlashInfer's one import-time dependency the GPU machine lacks; 0.1.15.post2 satisfies
# flashinfer-python's apache-tvm-ffi>=0.1.11,<0.2). Its other requirements are either on the
# GPU machine already (click, einops, ninja, numpy, nvidia-ml-py, packaging, requests, tabulate,
# torch, tqdm, cuda-bindings) or not imported by the decode and prefill paths (cuda-tile,
# nccl4py, nccl-extensions, nvidia-cudnn-frontend, nvidia-cutlass-dsl).
set -euo pipefail
cd "$(dirname "$0")/../.."

FLASHINFER_VERSION="${FLASHINFER_VERSION:-0.7.2.post1}"
VLLM_VERSION="${VLLM_VERSION:-0.26.0}"
TVM_FFI_VERSION="${TVM_FFI_VERSION:-0.1.15.post2}"
PEERS=.peers
DL="$PEERS/dl"
CARRY="$PEERS/carry"
host=0
stage_args=()
while (( $# )); do
  case "$1" in
    --host) host=1 ;;
    --aot) stage_args+=(--aot "$2"); shift ;;
    --no-jit-sources) stage_args+=(--no-jit-sources) ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "fetch_peers.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
grep -qx '/.peers/' .gitignore || { echo "fetch_peers.sh: .gitignore lacks /.peers/" >&2; exit 2; }
mkdir -p "$DL/gpu-wheels"
pip_dl() { python3 -m pip download -q --no-deps --disable-pip-version-check "$@"; }

# Pure-Python wheels (py3-none-any): one download serves both machines. Kept between runs.
[ -f "$DL/flashinfer_python-$FLASHINFER_VERSION-py3-none-any.whl" ] ||
  pip_dl -d "$DL" "flashinfer-python==$FLASHINFER_VERSION"
# vllm is a ~300 MB binary wheel of which two Python files are used.
ls "$DL"/vllm-"$VLLM_VERSION"-*.whl > /dev/null 2>&1 || pip_dl -d "$DL" "vllm==$VLLM_VERSION"
# The GPU machine's Python (3.12, x86-64 manylinux), as /work/.library/device/README.md says.
rm -f "$DL"/gpu-wheels/*.whl
pip_dl --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$DL/gpu-wheels" "apache-tvm-ffi==$TVM_FFI_VERSION"
# Only one version of each next to the others (two would stop pip on the device).
for f in "$DL"/flashinfer_python-*.whl "$DL"/vllm-*.whl; do
  case "$f" in
    *"-$FLASHINFER_VERSION-"*|*"-$VLLM_VERSION-"*) ;;
    *) rm -f "$f" ;;
  esac
done

python3 bench/peers/peers_pack.py stage --dl "$DL" --carry "$CARRY" "${stage_args[@]}"

if (( host )); then
  mkdir -p "$DL/host-wheels"
  rm -f "$DL"/host-wheels/*.whl
  pip_dl -d "$DL/host-wheels" "apache-tvm-ffi==$TVM_FFI_VERSION"
  # FlashInfer's import-time needs that this machine may lack (the GPU machine has them).
  for m in einops:einops tabulate:tabulate pynvml:nvidia-ml-py; do
    python3 -c "import ${m%%:*}" 2> /dev/null || pip_dl -d "$DL/host-wheels" "${m#*:}"
  done
  rm -rf "$PEERS/host_site"
  python3 bench/peers/peers_pack.py host --dl "$DL" --carry "$CARRY" --site "$PEERS/host_site"
  echo "host: PYTHONPATH=$PEERS/host_site:$CARRY/vllm_triton"
fi
