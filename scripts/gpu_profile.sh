#!/usr/bin/env bash
# Nsight Compute profile of the decode kernel on W1 (nhd and split layouts): throughput,
# memory, occupancy and warp-stall sections, as text in $OUT/profile.txt. Clocks are left as
# the card has them (--clock-control none).
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
for layout in nhd split; do
  echo "=== W1 $layout" >> "$OUT/profile.txt"
  timeout 150 "$NCU" --clock-control none -k regex:decode_mma_kernel --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
    --section WarpStateStats --section SchedulerStats --section LaunchStats \
    "$BUILD/pagedattn" bench --workloads W1 --layout "$layout" --iters 2 --warmup 1 \
    --ceiling-gb 0.5 >> "$OUT/profile.txt" 2>&1
done
grep -E "===|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Theoretical Occupancy|Stall|Registers|Block Limit|Warp Cycles Per Issued|Eligible|L2 Hit|L1/TEX Hit|Mem Busy|Max Bandwidth" "$OUT/profile.txt" | head -120
