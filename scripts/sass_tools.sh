#!/usr/bin/env bash
# cuobjdump and nvdisasm for a machine whose CUDA toolkit lacks them (nvcc and ptxas only),
# from NVIDIA's PyPI wheels (nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm) into .tools/
# (git-ignored). Prints the folder to put on PATH. With them, a kernel change can be checked
# without a GPU: `nvcc -cubin` or `-c` for sm_90a, then `cuobjdump -sass`, then
# scripts/sass_compare.py against the previous tree's object (instruction counts, spills in
# the loops, which instances changed).
#
#   export PATH="$(bash scripts/sass_tools.sh):$PATH"
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=.tools/sass
if [ ! -x "$DEST/bin/cuobjdump" ] || [ ! -x "$DEST/bin/nvdisasm" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download --quiet --no-deps -d "$tmp" nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm >&2
  mkdir -p "$DEST/bin"
  for w in "$tmp"/*.whl; do
    python3 -m zipfile -e "$w" "$tmp/x" >&2
  done
  find "$tmp/x" -type f \( -name cuobjdump -o -name nvdisasm \) -exec cp {} "$DEST/bin/" \;
  chmod +x "$DEST/bin/"*
fi
echo "$(pwd)/$DEST/bin"
