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
# Or one tree built twice with different compile-time switches (BASE_SRC=.), e.g. the
# prefill kernel's register split:
#   BASE_SRC=. NEW_CUDA_FLAGS=-DPAGEDATTN_WS_PRODUCER_REGS=40 WORKLOADS=prefill \
#     BENCH_ARGS='--check sampled --flush none --ceiling-gb 1 --warmup 3' ITERS=20 \
#     bash scripts/ab_bench.sh
#
# Environment: BASE_SRC (baseline tree, default build-base-src), WORKLOADS (default standard),
# LAYOUT (default nhd), ROUNDS (default 2), ITERS (default 100), OUT (default ./out), JOBS
# (parallel jobs of each of the two builds, default half the cores), NEW_CUDA_FLAGS and
# BASE_CUDA_FLAGS (CMAKE_CUDA_FLAGS of each build, default empty), BENCH_ARGS (more `bench`
# flags for both sides, default empty).
# Writes $OUT/ab.log (every round) and $OUT/ab.txt: per workload the median us of each round
# and min(new rounds) / min(base rounds). Odd rounds run the baseline first, even rounds the
# working tree first, so that a drift within the run does not favour one side. Exit status 0
# only if both builds and every round succeeded.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
BASE_SRC="${BASE_SRC:-build-base-src}"
WORKLOADS="${WORKLOADS:-standard}"
LAYOUT="${LAYOUT:-nhd}"
ROUNDS="${ROUNDS:-2}"
ITERS="${ITERS:-100}"
JOBS="${JOBS:-$(( ($(nproc) + 1) / 2 ))}"
OUT="${OUT:-./out}"
NEW_CUDA_FLAGS="${NEW_CUDA_FLAGS:-}"
BASE_CUDA_FLAGS="${BASE_CUDA_FLAGS:-}"
BENCH_ARGS="${BENCH_ARGS:-}"
mkdir -p "$OUT"
if [ ! -f "$BASE_SRC/CMakeLists.txt" ]; then
  echo "ab_bench: no baseline tree at $BASE_SRC (see the header of this script)" >&2
  exit 2
fi
build() {  # src build-dir cuda-flags: logs in build-dir.{configure,build}.log
  local src dir
  src="$(cd "$1" && pwd)" dir="$2"
  # A build folder configured from another source tree cannot be reused.
  if [ -f "$dir/CMakeCache.txt" ] &&
    ! grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$src" "$dir/CMakeCache.txt"; then
    rm -rf "$dir"
  fi
  rm -f "$dir.build.log"  # failed() shows the configure log when there is no build log
  cmake -S "$src" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGEDATTN_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90a "-DCMAKE_CUDA_FLAGS=$3" > "$dir.configure.log" 2>&1 || return 1
  cmake --build "$dir" -j "$JOBS" --target pagedattn_cli > "$dir.build.log" 2>&1
}
failed() {  # name dir
  echo "ab_bench: build of $1 failed"
  tail -20 "$2.build.log" 2>/dev/null || tail -20 "$2.configure.log"
}
t0=$(date +%s)
build . build-gpu "$NEW_CUDA_FLAGS" & p1=$!
build "$BASE_SRC" build-gpu-base "$BASE_CUDA_FLAGS" & p2=$!
ok1=0 ok2=0
wait $p1 || ok1=1
wait $p2 || ok2=1
(( ok1 == 0 )) || failed "the working tree" build-gpu
(( ok2 == 0 )) || failed "the baseline" build-gpu-base
(( ok1 == 0 && ok2 == 0 )) || exit 1
echo "ab_bench: both built in $(( $(date +%s) - t0 )) s"
: > "$OUT/ab.log"
rm -f "$OUT"/ab_base_*.json "$OUT"/ab_new_*.json  # no stale rounds in the summary
rc=0
for r in $(seq 1 "$ROUNDS"); do
  order="base new"
  (( r % 2 == 0 )) && order="new base"
  for side in $order; do
    cli=build-gpu/pagedattn
    [ "$side" = base ] && cli=build-gpu-base/pagedattn
    echo "== round $r $side" >> "$OUT/ab.log"
    # shellcheck disable=SC2086  # BENCH_ARGS is a list of flags
    if ! "$cli" bench --layout "$LAYOUT" --workloads "$WORKLOADS" --iters "$ITERS" $BENCH_ARGS \
      --json "$OUT/ab_${side}_$r.json" >> "$OUT/ab.log" 2>&1; then
      echo "ab_bench: $side round $r failed (see $OUT/ab.log)" >&2
      rc=1
    fi
  done
done
python3 - "$OUT" "$ROUNDS" > "$OUT/ab.txt" <<'EOF' || rc=1
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
exit $rc
