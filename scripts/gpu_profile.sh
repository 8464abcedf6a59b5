#!/usr/bin/env bash
# Nsight Compute profile of the decode fast path: W1 in the nhd and split layouts (throughput,
# memory, occupancy, warp stalls with their SASS locations) and W7 (durations of the split
# kernel and the merge), as text in $OUT/profile.txt; the SASS of the W1 kernel in
# $OUT/decode_sass.txt.gz. Clocks are left as the card has them (--clock-control none).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-./out}"
BUILD="${BUILD_DIR:-build-gpu}"
mkdir -p "$OUT"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGEDATTN_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90a > "$OUT/profile_build.log" 2>&1 &&
  cmake --build "$BUILD" -j "${JOBS:-16}" --target pagedattn_cli >> "$OUT/profile_build.log" 2>&1 ||
  { tail -30 "$OUT/profile_build.log"; exit 1; }
NCU="$(command -v ncu || echo /usr/local/cuda/bin/ncu)"
for layout in ${LAYOUTS:-nhd split}; do
  echo "=== W1 $layout" >> "$OUT/profile.txt"
  timeout 150 "$NCU" --clock-control none -k regex:decode_mma_kernel --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
    --section WarpStateStats --section SchedulerStats --section LaunchStats \
    --section SourceCounters --section InstructionStats \
    "$BUILD/pagedattn" bench --workloads W1 --layout "$layout" --iters 2 --warmup 1 \
    --ceiling-gb 0.5 >> "$OUT/profile.txt" 2>&1
done
echo "=== W7 nhd" >> "$OUT/profile.txt"
timeout 100 "$NCU" --clock-control none -k regex:decode --launch-skip 4 --launch-count 2 \
  --section SpeedOfLight --section WarpStateStats --section LaunchStats \
  "$BUILD/pagedattn" bench --workloads W7 --iters 2 --warmup 1 \
  --ceiling-gb 0.5 >> "$OUT/profile.txt" 2>&1
CUOBJDUMP="$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)"
obj=$(find "$BUILD" -name 'decode_mma.cu.o' | head -1)
[ -n "$obj" ] && "$CUOBJDUMP" -sass "$obj" 2>&1 | gzip > "$OUT/decode_sass.txt.gz"
grep -E "===|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Theoretical Occupancy|Stall|Registers|Block Limit|Warp Cycles Per Issued|Eligible|L2 Hit|L1/TEX Hit|Mem Busy|Max Bandwidth|Executed Ipc|Issue Slots|Instructions" "$OUT/profile.txt" | head -150
