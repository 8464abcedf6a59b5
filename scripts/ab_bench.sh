#!/usr/bin/env bash
# Same-run A/B benchmark of two source trees on one GPU: the working tree against a baseline
# tree (e.g. an earlier commit), each built as the `pagedattn` program only, then timed in
# alternating rounds so that both see the same card, clocks and read ceiling. The read
# ceiling moves by a few percent from run to run on an H200, so a kernel change is judged by
# A/B rounds of one run, not by numbers from different runs.
#
#   git archive <ref> | (mkdir -p build-base-src && tar -x -C build-base-src)   # on the host
#   # then, on the GPU machine (carry build-base-src):
#   BASE_SRC=build-base-src ROUNDS=3 WORKLOADS=W1,W2,W3 bash scripts/ab_bench.sh
#
# Environment: BASE_SRC (baseline tree, default build-base-src), WORKLOADS (default standard),
# LAYOUT (default nhd), ROUNDS (default 2), ITERS (default 100), OUT (default ./out), JOBS.
# Writes $OUT/ab.log (every round) and $OUT/ab.txt (per workload: median us of each round).
set -uo pipefail
cd "$(dirname "$0")/.."
BASE_SRC="${BASE_SRC:-build-base-src}"
WORKLOADS="${WORKLOADS:-standard}"
LAYOUT="${LAYOUT:-nhd}"
ROUNDS="${ROUNDS:-2}"
ITERS="${ITERS:-100}"
JOBS="${JOBS:-16}"
OUT="${OUT:-./out}"
mkdir -p "$OUT"
if [ ! -f "$BASE_SRC/CMakeLists.txt" ]; then
  echo "ab_bench: no baseline tree at $BASE_SRC (see the header of this script)" >&2
  exit 2
fi
build() {  # src build-dir
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGEDATTN_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90a > "$2.configure.log" 2>&1 &&
    cmake --build "$2" -j "$JOBS" --target pagedattn_cli > "$2.build.log" 2>&1
}
t0=$(date +%s)
build . build-gpu & p1=$!
build "$BASE_SRC" build-gpu-base & p2=$!
wait $p1 || { echo "ab_bench: build of the working tree failed"; tail -20 build-gpu.build.log; exit 1; }
wait $p2 || { echo "ab_bench: build of the baseline failed"; tail -20 build-gpu-base.build.log; exit 1; }
echo "ab_bench: both built in $(( $(date +%s) - t0 )) s"
: > "$OUT/ab.log"
for r in $(seq 1 "$ROUNDS"); do
  for side in base new; do
    cli=build-gpu/pagedattn
    [ "$side" = base ] && cli=build-gpu-base/pagedattn
    echo "== round $r $side" >> "$OUT/ab.log"
    "$cli" bench --layout "$LAYOUT" --workloads "$WORKLOADS" --iters "$ITERS" \
      --json "$OUT/ab_${side}_$r.json" >> "$OUT/ab.log" 2>&1 || echo "ab_bench: $side round $r failed" >&2
  done
done
python3 - "$OUT" "$ROUNDS" > "$OUT/ab.txt" <<'EOF'
import json, sys
out, rounds = sys.argv[1], int(sys.argv[2])
rows = {}
for side in ("base", "new"):
    for r in range(1, rounds + 1):
        try:
            doc = json.load(open(f"{out}/ab_{side}_{r}.json"))
        except OSError:
            continue
        rows.setdefault("read ceiling GB/s", {}).setdefault(side, []).append(doc["read_ceiling_gbps"])
        for row in doc.get("results", []):
            rows.setdefault(row["name"], {}).setdefault(side, []).append(row["median_us"])
print(f"{'workload':24s} {'base us (rounds)':30s} {'new us (rounds)':30s} new/base")
for w, d in rows.items():
    b, n = d.get("base", []), d.get("new", [])
    ratio = (min(n) / min(b)) if b and n else float("nan")
    fmt = lambda v: " ".join(f"{x:.1f}" for x in v)
    print(f"{w:24s} {fmt(b):30s} {fmt(n):30s} {ratio:.3f}")
EOF
cat "$OUT/ab.txt"
