#!/usr/bin/env bash
# Multi-GPU check of decode context parallelism (issue 25) in ONE call of at most 10 minutes,
# on a machine with >= 2 NVIDIA GPUs (an nvidia-h200-x2 or larger):
#   1. build the CUDA tests and the Python extension (build folder $BUILD_DIR, default build-gpu);
#   2. the NCCL tests: pagedattn_cuda_tests --gtest_filter='*ContextParallel*' (2-rank cases,
#      and the 4-rank ones when 4 GPUs are visible; they skip themselves otherwise);
#   3. pytest tests/python/test_distributed.py (Gloo on the CPU; the same code path as NCCL);
#   4. bench/context_parallel.py on 1 GPU and on 2 GPUs (torchrun, NCCL): 1 x 1,048,576-token
#      decode and W4; time per step, speed-up, gather and merge cost, diff vs 1 GPU.
# NVLink multicast stays off: NCCL_NVLS_ENABLE=0 and TORCH_SYMM_MEM_DISABLE_MULTICAST=1 are
# exported for every step (on a shared host multicast can take the GPUs out of service).
#
#   bash scripts/gpu_check_multi.sh           # or: MODE=multi bash scripts/gpu_check.sh
#   OUT=/some/dir JOBS=32 BENCH_ARGS="--iters 100" bash scripts/gpu_check_multi.sh
#
# $OUT (default ./out) receives summary.txt, logs/ and cp_bench_1gpu.json / cp_bench_2gpu.json.
# Exit status 0 iff every step passed; 3 with fewer than two GPUs (it says so; nothing runs).
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1

OUT="${OUT:-./out}"
JOBS="${JOBS:-16}"
BUILD="${BUILD_DIR:-build-gpu}"
BENCH_ARGS="${BENCH_ARGS:-}"
mkdir -p "$OUT/logs"
OUT="$(cd "$OUT" && pwd)"
LOG="$OUT/logs"
START=$(date +%s)
BUDGET_S="${BUDGET_S:-570}"
left() { echo $(( BUDGET_S - ($(date +%s) - START) )); }
limited() {  # seconds reserve cmd...: timeout of min(seconds, time left - reserve)
  local want=$1 reserve=$2; shift 2
  local avail=$(( $(left) - reserve ))
  (( avail < want )) && want=$avail
  (( want < 5 )) && return 124
  timeout --signal=TERM --kill-after=10 "$want" "$@"
}
declare -a SUMMARY
record() { SUMMARY+=("$(printf '%-22s %-5s %5ss  %s' "$1" "$2" "$3" "$4")"); }

ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
echo "== gpu_check_multi: $ngpu GPU(s) visible; NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE TORCH_SYMM_MEM_DISABLE_MULTICAST=$TORCH_SYMM_MEM_DISABLE_MULTICAST"
if (( ngpu < 2 )); then
  echo "gpu_check_multi: needs at least 2 NVIDIA GPUs, found $ngpu: nothing built or run" \
       "(use an nvidia-h200-x2 machine)" >&2
  exit 3
fi
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader | tee "$LOG/gpu.txt"
nvidia-smi topo -m > "$LOG/topo.txt" 2>&1 || true

t0=$(date +%s)
PY=(-DPAGEDATTN_PYTHON=OFF); PYT=()
if python3 -c 'import nanobind' 2>/dev/null; then
  PY=(-DPAGEDATTN_PYTHON=ON -DPython_EXECUTABLE="$(command -v python3)"); PYT=(pagedattn_py)
fi
{ cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGEDATTN_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90a "${PY[@]}" &&
  limited 330 150 cmake --build "$BUILD" -j "$JOBS" --target pagedattn_cuda_tests "${PYT[@]}"; } \
  > "$LOG/build.log" 2>&1
rc=$?; build_rc=$rc
record build "$([ $rc -eq 0 ] && echo ok || echo FAIL)" $(( $(date +%s) - t0 )) \
  "$(grep -o 'NCCL communicator [A-Z]*' "$LOG/build.log" | head -1)"
(( rc != 0 )) && tail -30 "$LOG/build.log"

if (( build_rc == 0 )); then
  t0=$(date +%s)
  limited 150 120 "$BUILD/tests/pagedattn_cuda_tests" --gtest_filter='*ContextParallel*' \
    > "$LOG/nccl_tests.log" 2>&1
  rc=$?
  p=$(grep -Eo '\[  PASSED  \] [0-9]+' "$LOG/nccl_tests.log" | grep -Eo '[0-9]+$' || echo 0)
  s=$(grep -c '^\[  SKIPPED \] ' "$LOG/nccl_tests.log" || true)
  record nccl_tests "$([ $rc -eq 0 ] && echo ok || echo FAIL)" $(( $(date +%s) - t0 )) \
    "$p passed (skipped lines: $s)"
  grep -E '^\[  FAILED  \]|needs [0-9]+ CUDA devices|no NCCL' "$LOG/nccl_tests.log" | sort | uniq -c | head -10
fi

export PYTHONPATH="$PWD/$BUILD/python${PYTHONPATH:+:$PYTHONPATH}"
if (( build_rc == 0 )) && ((${#PYT[@]})) && python3 -c 'import torch' 2>/dev/null; then
  t0=$(date +%s)
  limited 90 100 python3 -m pytest -q tests/python/test_distributed.py > "$LOG/pytest.log" 2>&1
  rc=$?
  record pytest_distributed "$([ $rc -eq 0 ] && echo ok || echo FAIL)" $(( $(date +%s) - t0 )) \
    "$(tail -1 "$LOG/pytest.log")"
  for n in 1 2; do
    t0=$(date +%s)
    limited 150 10 torchrun --standalone --nproc-per-node=$n bench/context_parallel.py \
      --json "$OUT/cp_bench_${n}gpu.json" $BENCH_ARGS > "$LOG/bench_${n}gpu.log" 2>&1
    rc=$?
    record "bench_${n}gpu" "$([ $rc -eq 0 ] && echo ok || echo FAIL)" $(( $(date +%s) - t0 )) "exit $rc"
    grep -v '^W[0-9]\{4\}\|OMP_NUM_THREADS\|^\*\{10\}' "$LOG/bench_${n}gpu.log" | tail -25
  done
else
  record python_steps skip 0 "no extension build (nanobind) or no torch"
fi

printf '%s\n' "${SUMMARY[@]}" | tee "$OUT/summary.txt"
! printf '%s\n' "${SUMMARY[@]}" | grep -q ' FAIL '
