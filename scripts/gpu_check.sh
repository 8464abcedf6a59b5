#!/usr/bin/env bash
# GPU check for an H200 (or any sm_90 machine) in ONE call of at most 10 minutes.
#
#   MODE=check (default): build the CUDA backend, run the GPU test suite, the Sanitize* subset
#     under compute-sanitizer (memcheck; a smaller slice under racecheck and synccheck),
#     `pagedattn verify --device cuda --cases all` and `pagedattn run --device cuda`;
#   MODE=bench: build the program, run `pagedattn bench` (standard + trace workloads and the
#     sweeps, nhd; W1/W2/W5 also in the split layout; the standard ones also under the dirty
#     flush), dense PyTorch SDPA on the same shapes (bench/sdpa_compare.py, both flushes),
#     the joined table + bandwidth plot (bench/report.py), and last the configuration matrix
#     (`pagedattn bench --matrix`: dtype x head size x layout x skew, about 3 minutes; it gets
#     the time left);
#   MODE=all: both (needs a warm build to fit in 10 minutes);
#   GPU_SUITE_FILTER (check/all): gtest filter of the GPU-suite step (default: everything but
#     the Sanitize* cases, which run under the sanitizers);
#   MODE=quick: a kernel-development loop: build, the GPU test suite (no sanitizers) and the
#     standard decode workloads (nhd; W1/W2/W5 split), about two minutes.
#   MODE=peers: pagedattn beside FlashInfer, vLLM's Triton attention and PyTorch SDPA on the
#     same data (bench/peers/run_peers.py; issue 22): installs the payload that
#     bench/peers/fetch_peers.sh staged in .peers/carry (carry that folder), builds the Python
#     extension and the CLI, JIT-builds the FlashInfer modules that are not prebuilt (returned
#     as flashinfer_aot_<k>.tar.xz: stage them with peers_pack.py add-aot for the next call),
#     writes peers.json, peers.md and peers.png, and returns vLLM's Triton cache when it grew
#     (triton_cache.tar.xz); PEERS_WORKLOADS / PEERS_ARGS narrow the run,
#     PEERS_PREBUILD_WORKLOADS the FlashInfer builds (default: PEERS_WORKLOADS's);
#   MODE=python: build the Python extension only and run the pytest suite on cuda tensors
#     (`pytest tests/python --device cuda`: the shared matrix, torch.compile, opcheck, the
#     current stream, CUDA-graph replay) and bench/python_overhead.py (host overhead of
#     BatchAttention.run over the C++ call). MODE=check runs the same pytest step last, in
#     the time it has left. Both need nanobind and torch for python3.
#
#   MODE=multi: decode context parallelism on >= 2 GPUs (NCCL tests, the Gloo pytest, the
#     1- vs 2-GPU bench), with NVLink multicast off: scripts/gpu_check_multi.sh, which says so
#     and exits 3 when fewer than two GPUs are visible.
#
#   bash scripts/gpu_check.sh            # from the repository root
#   OUT=/some/dir JOBS=16 MODE=bench bash scripts/gpu_check.sh
#
# $OUT (default ./out) receives summary.txt, logs.tgz (every log) and, for bench, report.md,
# bench.png and results.tgz (bench.json, bench.csv, bench_split.json, bench_dirty.json,
# bench_matrix.json, bench_matrix.csv, sdpa.json, sdpa_dirty.json, report.md, report_dirty.md,
# report_matrix.md). Exit status 0 iff every step passed;
# 3 without an NVIDIA GPU (nothing is built or run).
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "${MODE:-}" = multi ]; then exec bash scripts/gpu_check_multi.sh; fi

OUT="${OUT:-./out}"
MODE="${MODE:-check}"
JOBS="${JOBS:-16}"
BUILD="${BUILD_DIR:-build-gpu}"
BUDGET_S="${BUDGET_S:-570}"          # whole script; the caller's limit is 600 s
mkdir -p "$OUT/logs"
OUT="$(cd "$OUT" && pwd)"
LOG="$OUT/logs"
START=$(date +%s)

declare -a NAMES STATUSES SECS DETAILS
record() {  # name status seconds detail
  NAMES+=("$1"); STATUSES+=("$2"); SECS+=("$3"); DETAILS+=("$4")
}
left() { echo $(( BUDGET_S - ($(date +%s) - START) )); }
# Run "$@" with a timeout of min($1, time left - reserve) seconds; the reserve keeps room for the
# steps after it and the summary.
run_limited() {
  local want=$1 reserve=$2; shift 2
  local avail=$(( $(left) - reserve ))
  (( avail < want )) && want=$avail
  if (( want < 5 )); then return 124; fi
  timeout --signal=TERM --kill-after=10 "$want" "$@"
}
gtest_counts() {  # log -> "P passed, F failed, S skipped"
  local log=$1 p f s
  p=$(grep -Eo '\[  PASSED  \] [0-9]+' "$log" | tail -1 | grep -Eo '[0-9]+$' || true)
  f=$(grep -Eo '\[  FAILED  \] [0-9]+ test' "$log" | tail -1 | grep -Eo '^\[  FAILED  \] [0-9]+' | grep -Eo '[0-9]+$' || true)
  s=$(grep -Eo '\[  SKIPPED \] [0-9]+' "$log" | tail -1 | grep -Eo '[0-9]+$' || true)
  echo "${p:-0} passed, ${f:-0} failed, ${s:-0} skipped"
}
sanitizer_errors() {  # log -> "N errors" (memcheck/synccheck: ERROR SUMMARY; racecheck: hazards)
  local n
  n=$(grep -Eo '(ERROR SUMMARY: [0-9]+|RACECHECK SUMMARY: [0-9]+)' "$1" | tail -1 | grep -Eo '[0-9]+$' || true)
  echo "${n:-?} sanitizer errors"
}

echo "== gpu_check: logs in $OUT"
if ! nvidia-smi -L > "$LOG/gpu.txt" 2>&1 || ! grep -q '^GPU ' "$LOG/gpu.txt"; then
  # Without a GPU every GPU test skips itself: say so instead of reporting skipped steps as ok.
  echo "gpu_check: no NVIDIA GPU on this machine (nvidia-smi -L: $(head -1 "$LOG/gpu.txt")); it needs one" >&2
  exit 3
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee "$LOG/gpu.txt"

# ---------------------------------------------------------------- build
t0=$(date +%s)
PY_FLAGS=(-DPAGEDATTN_PYTHON=OFF)
PY_TARGET=()
# Only where python3 has nanobind and its headers: a configure that fails on them would stop
# every other step.
if python3 -c 'import nanobind, sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null; then
  PY_FLAGS=(-DPAGEDATTN_PYTHON=ON -DPython_EXECUTABLE="$(command -v python3)")
  PY_TARGET=(pagedattn_py)
fi
{
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGEDATTN_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90a "${PY_FLAGS[@]}" &&
  if [ "$MODE" = python ]; then
    run_limited 330 200 cmake --build "$BUILD" -j "$JOBS" --target "${PY_TARGET[@]:-pagedattn_py}"
  elif [ "$MODE" = peers ]; then
    # 120 s kept for the run: a cut build leaves no table; a cut run keeps its rows.
    run_limited 300 120 cmake --build "$BUILD" -j "$JOBS" --target "${PY_TARGET[@]:-pagedattn_py}" pagedattn_cli
  elif [ "$MODE" = bench ]; then
    run_limited 330 120 cmake --build "$BUILD" -j "$JOBS" --target pagedattn_cli
  else
    run_limited 330 200 cmake --build "$BUILD" -j "$JOBS" --target pagedattn_cuda_tests pagedattn_cli pagedattn_unit_tests "${PY_TARGET[@]}"
  fi
} > "$LOG/build.log" 2>&1
rc=$?
build_rc=$rc
t1=$(date +%s)
if (( rc != 0 )); then
  record build FAIL $((t1 - t0)) "exit $rc (see build.log)"
  tail -30 "$LOG/build.log"
else
  record build ok $((t1 - t0)) "$(grep -c 'warning' "$LOG/build.log") warning lines"
fi

TESTS="$BUILD/tests/pagedattn_cuda_tests"
UNIT="$BUILD/tests/pagedattn_unit_tests"
CLI="$BUILD/pagedattn"
SAN="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"

if (( build_rc == 0 )) && [ "$MODE" = quick ]; then
  t0=$(date +%s)
  # The three slowest cases (oracle time on the host: 131072-token sequences, a 2^31-element
  # cache) wait for the full check.
  run_limited 240 100 "$TESTS" \
    --gtest_filter='-Sanitize*:CudaHeavy.LongSequence131072DecodeAndPrefillChunk:*idx2e31*:*len131072*' \
    > "$LOG/tests.log" 2>&1
  rc=$?; t1=$(date +%s)
  record cuda_tests "$([ $rc -eq 0 ] && echo ok || echo FAIL)" $((t1 - t0)) "$(gtest_counts "$LOG/tests.log")$([ $rc -eq 124 ] && echo ', TIMEOUT')"
  grep -E '^\[  FAILED  \]' "$LOG/tests.log" | head -20
  t0=$(date +%s)
  run_limited 90 10 "$CLI" bench --workloads standard --json "$OUT/bench.json" > "$LOG/bench.log" 2>&1
  brc=$?
  run_limited 60 5 "$CLI" bench --layout split --workloads W1,W2,W5 --json "$OUT/bench_split.json" \
    >> "$LOG/bench.log" 2>&1 || brc=$?
  t1=$(date +%s)
  record bench "$([ $brc -eq 0 ] && echo ok || echo FAIL)" $((t1 - t0)) "exit $brc"
  cat "$LOG/bench.log"
fi

# MODE=peers runs none of the checks: on a build folder that also holds the test binaries
# (a MODE=check before it) they took the peers run's time (session 15: the table stopped at 9 of
# its 18 workloads).
if (( build_rc == 0 )) && [ "$MODE" != bench ] && [ "$MODE" != quick ] && [ "$MODE" != python ] &&
   [ "$MODE" != peers ]; then
  # ---------------------------------------------------------------- host index emulation
  t0=$(date +%s)
  run_limited 60 150 "$UNIT" --gtest_filter='CudaIndexing*' > "$LOG/unit.log" 2>&1
  rc=$?; t1=$(date +%s)
  record unit_cuda_indexing "$([ $rc -eq 0 ] && echo ok || echo FAIL)" $((t1 - t0)) "$(gtest_counts "$LOG/unit.log")"

  # ---------------------------------------------------------------- verify (CLI) in background
  # The CLI runs the same matrix through `pagedattn verify`; it overlaps the sanitizer runs (the
  # GPU has room for both, compute-sanitizer instruments only its own process).
  t_verify0=$(date +%s)
  ( run_limited 300 60 "$CLI" verify --device cuda --cases all > "$LOG/verify.log" 2>&1
    echo $? > "$LOG/verify.rc" ) &
  verify_pid=$!

  # ---------------------------------------------------------------- GPU test suite
  # In GPU_SUITE_SHARDS processes at once (gtest sharding): the oracle of the long cases (2^20
  # and 131072 keys, a 2^31-element cache) runs on the host, and one process of it no longer
  # fits the step's time.
  t0=$(date +%s)
  shards="${GPU_SUITE_SHARDS:-4}"
  pids=()
  for ((i = 0; i < shards; ++i)); do
    GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i run_limited 330 150 "$TESTS" \
      --gtest_filter="${GPU_SUITE_FILTER:--Sanitize*}" > "$LOG/tests.$i.log" 2>&1 &
    pids+=($!)
  done
  rc=0
  for p in "${pids[@]}"; do wait "$p" || { r=$?; (( r > rc )) && rc=$r; }; done
  t1=$(date +%s)
  cat "$LOG"/tests.*.log > "$LOG/tests.log"
  counts=$(for ((i = 0; i < shards; ++i)); do gtest_counts "$LOG/tests.$i.log"; done |
    awk '{p += $1; f += $3; s += $5} END {printf "%d passed, %d failed, %d skipped", p, f, s}')
  record cuda_tests "$([ $rc -eq 0 ] && echo ok || echo FAIL)" $((t1 - t0)) "$counts ($shards shards)$([ $rc -eq 124 ] && echo ', TIMEOUT')"
  grep -E '^\[  FAILED  \]' "$LOG/tests.log" | sort -u | head -20

  # ---------------------------------------------------------------- sanitizers
  if [ -x "$SAN" ]; then
    t0=$(date +%s)
    run_limited 200 60 "$SAN" --tool memcheck --leak-check no --error-exitcode 99 --print-limit 50 \
      "$TESTS" --gtest_filter='Sanitize*' > "$LOG/memcheck.log" 2>&1
    rc=$?; t1=$(date +%s)
    record memcheck "$([ $rc -eq 0 ] && echo ok || echo FAIL)" $((t1 - t0)) "$(sanitizer_errors "$LOG/memcheck.log"); $(gtest_counts "$LOG/memcheck.log")$([ $rc -eq 124 ] && echo ', TIMEOUT')"

    # A slice that still reaches every shared-memory path: splits (merge), padded pages (the
    # element-wise loader), block 2048, fp8, the head-64 edge, the writers, and the prefill
    # kernel's pipeline (split head 64 with 4 stages, hnd head 128 with 3 stages), the
    # small-call kernel and the paired head-64 kernel, and the NaN-query and no-finite-logit
    # cases (every merge).
    slice='Sanitize/SanitizeQuick.*dsmall*:Sanitize/SanitizeQuick.*dpair*:Sanitize/SanitizeQuick.*nanq*:Sanitize/SanitizeQuick.*ninfk*:Sanitize/SanitizeQuick.*splits*:Sanitize/SanitizeQuick.*padded*:Sanitize/SanitizeQuick.*bs2048*:Sanitize/SanitizeQuick.*fp8scale*:SanitizeEdges.*:Sanitize/SanitizeWriter.*split_fp16_to_fp16*:SanitizePrefill/SanitizePrefillMma.*h64_q20kv4*:SanitizePrefill/SanitizePrefillMma.*h128_q24kv8*:SanitizePrefillWgmma/*:Sanitize/SanitizeQuick.*dfp8*:Sanitize/SanitizeQuick.*dh256*:Sanitize/SanitizeQuick.*invariant*:Sanitize/SanitizeQuick.*dhmid*'
    for tool in racecheck synccheck; do
      t0=$(date +%s)
      run_limited 90 20 "$SAN" --tool "$tool" --error-exitcode 99 --print-limit 50 \
        "$TESTS" --gtest_filter="$slice" > "$LOG/$tool.log" 2>&1
      rc=$?; t1=$(date +%s)
      record "$tool" "$([ $rc -eq 0 ] && echo ok || echo FAIL)" $((t1 - t0)) "$(sanitizer_errors "$LOG/$tool.log"); $(gtest_counts "$LOG/$tool.log")$([ $rc -eq 124 ] && echo ', TIMEOUT')"
    done
  else
    record memcheck SKIP 0 "compute-sanitizer not found"
  fi

  # ---------------------------------------------------------------- verify result
  wait "$verify_pid"
  t1=$(date +%s)
  vrc=$(cat "$LOG/verify.rc" 2>/dev/null || echo '?')
  record verify_all "$([ "$vrc" = 0 ] && echo ok || echo FAIL)" $((t1 - t_verify0)) "exit $vrc; $(grep -E '^[0-9]+ passed, [0-9]+ failed' "$LOG/verify.log" | tail -1)"

  # ---------------------------------------------------------------- serving replay
  t0=$(date +%s)
  run_limited 60 5 "$CLI" run --device cuda > "$LOG/run.log" 2>&1
  rc=$?; t1=$(date +%s)
  record run_cuda "$([ $rc -eq 0 ] && echo ok || echo FAIL)" $((t1 - t0)) "exit $rc"
fi

if (( build_rc == 0 )) && { [ "$MODE" = python ] || [ "$MODE" = check ]; }; then
  # ---------------------------------------------------------------- Python package on cuda
  t0=$(date +%s)
  if [ ${#PY_TARGET[@]} -eq 0 ]; then
    record pytest_cuda FAIL 0 "no nanobind or Python.h for python3: the extension was not built"
  else
    py_path="$(cd "$BUILD" && pwd)/python"
    PYTHONPATH="$py_path" run_limited 240 20 python3 -m pytest tests/python \
      --device cuda -q -p no:cacheprovider > "$LOG/pytest.log" 2>&1
    rc=$?; t1=$(date +%s)
    record pytest_cuda "$([ $rc -eq 0 ] && echo ok || echo FAIL)" $((t1 - t0)) "$(grep -E '[0-9]+ (passed|failed)' "$LOG/pytest.log" | tail -1)$([ $rc -eq 124 ] && echo ', TIMEOUT')"
    grep -E '^(FAILED|ERROR) ' "$LOG/pytest.log" | head -20
    t0=$(date +%s)
    PYTHONPATH="$py_path" run_limited 60 5 python3 bench/python_overhead.py \
      --json "$OUT/python_overhead.json" > "$LOG/python_overhead.log" 2>&1
    rc=$?; t1=$(date +%s)
    record python_overhead "$([ $rc -eq 0 ] && echo ok || echo FAIL)" $((t1 - t0)) "$(grep -o 'overhead *[0-9.]* us' "$LOG/python_overhead.log" | tr '\n' ' ')"
    cat "$LOG/python_overhead.log"
  fi
fi

if (( build_rc == 0 )) && [ "$MODE" = peers ]; then
  # ---------------------------------------------------------------- peers (issue 22)
  t0=$(date +%s)
  site=/tmp/peers_site
  python3 bench/peers/peers_pack.py install --carry .peers/carry --site "$site" \
    > "$LOG/peers_install.log" 2>&1
  rc=$?
  peers_path="$(grep '^PYTHONPATH=' "$LOG/peers_install.log" | tail -1 | cut -d= -f2-)"
  record peers_install "$([ $rc -eq 0 ] && echo ok || echo FAIL)" $(( $(date +%s) - t0 )) \
    "$(grep -E 'flashinfer unpacked|Error' "$LOG/peers_install.log" | head -1)"
  export PYTHONPATH="$(cd "$BUILD" && pwd)/python${peers_path:+:$peers_path}"
  export FLASHINFER_WORKSPACE_BASE=/tmp/fi_ws TVM_FFI_CACHE_DIR=/tmp/tvm_ffi_cache \
    FLASHINFER_CUDA_ARCH_LIST=9.0a PYTHONUNBUFFERED=1
  peers_wl="${PEERS_WORKLOADS:-standard,trace,config,prefill}"
  # vLLM's Triton kernels compile on first use (seconds per variant): a cache carried from an
  # earlier call (.peers/carry/triton_cache.tar.xz, this script's $OUT/triton_cache.tar.xz)
  # is reused.
  export TRITON_CACHE_DIR=/tmp/peers_triton_cache
  mkdir -p "$TRITON_CACHE_DIR"
  [ -f .peers/carry/triton_cache.tar.xz ] && tar -xJf .peers/carry/triton_cache.tar.xz -C "$TRITON_CACHE_DIR"
  triton_before=$(find "$TRITON_CACHE_DIR" -type f | wc -l)
  # FlashInfer's modules that were not carried prebuilt: compiled here in one ninja run on
  # every core (about 10 CUDA files a module) and returned as $OUT/flashinfer_aot_<k>.tar.xz
  # for the next call (peers_pack.py add-aot). The builds stop, and what is built is packed,
  # with 280 s left for the timed run.
  t0=$(date +%s)
  run_limited 360 120 python3 bench/peers/run_peers.py --cli "$CLI" \
    --workloads "${PEERS_PREBUILD_WORKLOADS:-$peers_wl}" --no-smoke \
    --prebuild-flashinfer "$OUT/flashinfer_aot" --jobs "$JOBS" --deadline-s $(( $(left) - 280 )) \
    > "$LOG/peers_jit.log" 2>&1
  rc=$?
  mv -f "$OUT"/flashinfer_aot_times.json "$OUT"/flashinfer_aot_ninja.log "$LOG"/ 2>/dev/null
  record flashinfer_jit "$([ $rc -eq 0 ] && echo ok || echo FAIL)" $(( $(date +%s) - t0 )) \
    "$(grep -E '^prebuild: [0-9]+ built' "$LOG/peers_jit.log" | tail -1)$([ $rc -eq 124 ] && echo ', TIMEOUT')"
  cat "$LOG/peers_jit.log"
  t0=$(date +%s)
  # shellcheck disable=SC2086  # PEERS_ARGS: several flags
  run_limited 400 10 python3 bench/peers/run_peers.py --cli "$CLI" --workloads "$peers_wl" \
    --json "$OUT/peers.json" --md "$OUT/peers.md" --png "$OUT/peers.png" ${PEERS_ARGS:-} \
    > "$LOG/peers.log" 2>&1
  rc=$?
  record peers "$([ $rc -eq 0 ] && echo ok || echo FAIL)" $(( $(date +%s) - t0 )) \
    "exit $rc$([ $rc -eq 124 ] && echo ', TIMEOUT')"
  if (( $(find "$TRITON_CACHE_DIR" -type f | wc -l) > triton_before )); then
    tar -cJf "$OUT/triton_cache.tar.xz" -C "$TRITON_CACHE_DIR" . &&
      echo "triton cache: $(du -sh "$OUT/triton_cache.tar.xz" | cut -f1) -> \$OUT/triton_cache.tar.xz (carry it as .peers/carry/triton_cache.tar.xz)"
  fi
  cat "$LOG/peers.log"
fi

if (( build_rc == 0 )) && [ "$MODE" != check ] && [ "$MODE" != quick ] && [ "$MODE" != python ] &&
   [ "$MODE" != peers ]; then
  # ---------------------------------------------------------------- benchmark
  t0=$(date +%s)
  run_limited 150 90 "$CLI" bench --workloads standard,trace --sweep --json "$OUT/bench.json" \
    --csv "$OUT/bench.csv" > "$LOG/bench.log" 2>&1
  brc=$?
  run_limited 60 80 "$CLI" bench --layout split --workloads W1,W2,W5 --json "$OUT/bench_split.json" \
    >> "$LOG/bench.log" 2>&1 || brc=$?
  # The same workloads under the dirty flush (the method of issue 4's reference numbers).
  run_limited 60 70 "$CLI" bench --flush dirty --workloads standard --json "$OUT/bench_dirty.json" \
    >> "$LOG/bench.log" 2>&1 || brc=$?
  t1=$(date +%s)
  record bench "$([ $brc -eq 0 ] && echo ok || echo FAIL)" $((t1 - t0)) "exit $brc"
  t0=$(date +%s)
  PYTHONUNBUFFERED=1 run_limited 120 25 python3 bench/sdpa_compare.py --workloads all \
    --json "$OUT/sdpa.json" > "$LOG/sdpa.log" 2>&1
  src=$?
  PYTHONUNBUFFERED=1 run_limited 40 15 python3 bench/sdpa_compare.py --flush dirty \
    --workloads W1,W2,W3,W7 --json "$OUT/sdpa_dirty.json" >> "$LOG/sdpa.log" 2>&1 || src=$?
  t1=$(date +%s)
  record sdpa "$([ $src -eq 0 ] && echo ok || echo FAIL)" $((t1 - t0)) "exit $src"
  python3 bench/report.py "$OUT/bench.json" --sdpa "$OUT/sdpa.json" --png "$OUT/bench.png" \
    --markdown "$OUT/report.md" > "$LOG/report.log" 2>&1
  rrc=$?
  python3 bench/report.py "$OUT/bench_dirty.json" --sdpa "$OUT/sdpa_dirty.json" \
    --markdown "$OUT/report_dirty.md" >> "$LOG/report.log" 2>&1 || rrc=$?
  record report "$([ $rrc -eq 0 ] && echo ok || echo FAIL)" 0 \
    "report.md, report_dirty.md, bench.png"
  # The configuration matrix (docs/performance.md, "The configuration matrix").
  t0=$(date +%s)
  run_limited 240 5 "$CLI" bench --matrix --json "$OUT/bench_matrix.json" \
    --csv "$OUT/bench_matrix.csv" > "$LOG/bench_matrix.log" 2>&1
  mrc=$?; t1=$(date +%s)
  [ -s "$OUT/bench_matrix.json" ] && python3 bench/report.py "$OUT/bench_matrix.json" \
    --markdown "$OUT/report_matrix.md" >> "$LOG/report.log" 2>&1
  record bench_matrix "$([ $mrc -eq 0 ] && echo ok || echo FAIL)" $((t1 - t0)) "exit $mrc$([ $mrc -eq 124 ] && echo ', TIMEOUT'); report_matrix.md"
  cat "$LOG/bench.log"
  cat "$OUT/report.md" "$OUT/report_dirty.md" 2>/dev/null
  cat "$LOG/bench_matrix.log"
fi

# ---------------------------------------------------------------- summary
{
  echo
  echo "== gpu_check summary ($(date -u +%FT%TZ), $(( $(date +%s) - START )) s)"
  printf '%-20s %-6s %6s  %s\n' step status sec detail
  all_ok=1
  for i in "${!NAMES[@]}"; do
    printf '%-20s %-6s %6s  %s\n' "${NAMES[$i]}" "${STATUSES[$i]}" "${SECS[$i]}" "${DETAILS[$i]}"
    [ "${STATUSES[$i]}" = ok ] || all_ok=0
  done
  echo
  for f in tests memcheck racecheck synccheck; do
    [ -f "$LOG/$f.log" ] || continue
    grep -E '^\[  FAILED  \] [A-Za-z]' "$LOG/$f.log" | sort -u | head -20 | sed "s/^/$f: /"
  done
  echo "overall: $([ $all_ok = 1 ] && echo PASS || echo FAIL)"
} | tee "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$LOG"
# The device tool brings back only a few files per call: every result file also goes into one
# archive (summary.txt, report.md and bench.png stay beside it for a quick look).
( cd "$OUT" || exit
  shopt -s nullglob  # a failed step leaves some of these out: archive the others
  files=(bench*.json bench*.cs[v] sdpa*.json report*.md python_overhead.jso[n])  # [v]: a glob, so nullglob applies
  (( ${#files[@]} )) || exit 0
  tar czf results.tgz "${files[@]}" &&
    for f in "${files[@]}"; do [ "$f" = report.md ] || rm -f "$f"; done )
grep -q 'overall: PASS' "$OUT/summary.txt"
