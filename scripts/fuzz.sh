#!/usr/bin/env bash
# Build the libFuzzer targets (fuzz/) with clang, ASan and UBSan, and run each one for
# FUZZ_SECONDS (default 30) from the committed corpus (fuzz/corpus/<target>/, plus the matrix
# cases as seeds for fuzz_attention) and the committed crash regressions
# (fuzz/regressions/<target>/, each a past crash that must now pass).
#
#   bash scripts/fuzz.sh                         # the smoke that scripts/test.sh runs
#   FUZZ_SECONDS=3600 FUZZ_TARGETS=fuzz_merge bash scripts/fuzz.sh   # a long run of one target
#
# Environment: FUZZ_SECONDS, FUZZ_TARGETS (space-separated; default all), BUILD_DIR (default
# build-fuzz), JOBS, FUZZ_OUT (new corpus entries and crash files; default $BUILD_DIR/work),
# FUZZ_MATRIX_SEEDS (matrix cases given to fuzz_attention as seeds, spread over the matrix;
# default 16, which libFuzzer runs before it starts mutating (under a minute on 2 cores); 0 = all).
# Exit status 0 iff every target built, every regression input passed and no run crashed.
set -euo pipefail
cd "$(dirname "$0")/.."
targets=(${FUZZ_TARGETS:-fuzz_attention fuzz_write_kv fuzz_merge fuzz_dlpack fuzz_trace fuzz_cli})
seconds="${FUZZ_SECONDS:-30}"
build_dir="${BUILD_DIR:-build-fuzz}"
jobs="${JOBS:-$(nproc)}"
work="${FUZZ_OUT:-$build_dir/work}"

# clang 14 and its runtime (libFuzzer, ASan, UBSan) from Debian's packages.
PAGEDATTN_INSTALL_ONLY=1 bash scripts/setup.sh
need=()
command -v clang++ >/dev/null 2>&1 || need+=(clang)
dpkg -s libclang-rt-14-dev >/dev/null 2>&1 || need+=(libclang-rt-14-dev)
if ((${#need[@]})); then
  echo "fuzz: installing ${need[*]}"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

flags="-fsanitize=address,undefined,fuzzer-no-link -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g -O1"
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DPAGEDATTN_CUDA=OFF -DPAGEDATTN_BUILD_TESTS=OFF -DPAGEDATTN_BUILD_TOOLS=OFF \
  -DPAGEDATTN_BUILD_EXAMPLES=OFF -DPAGEDATTN_PYTHON=OFF -DPAGEDATTN_BUILD_FUZZ=ON >/dev/null
cmake --build "$build_dir" -j "$jobs" --target "${targets[@]}" pagedattn_fuzz_seeds

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
rc=0
summary=()
for t in "${targets[@]}"; do
  mkdir -p "$work/$t/corpus" "$work/$t/crashes"
  if [ -d "fuzz/regressions/$t" ] && [ -n "$(ls -A "fuzz/regressions/$t")" ]; then
    if ! "$build_dir/fuzz/$t" "fuzz/regressions/$t"/* >"$work/$t/regressions.log" 2>&1; then
      echo "fuzz: $t fails a regression input (log: $work/$t/regressions.log)"
      tail -20 "$work/$t/regressions.log"
      rc=1
    fi
  fi
  seeds=()
  [ -d "fuzz/corpus/$t" ] && seeds+=("fuzz/corpus/$t")
  if [ "$t" = fuzz_attention ]; then
    mkdir -p "$work/$t/matrix"
    "$build_dir/fuzz/pagedattn_fuzz_seeds" "$work/$t/matrix" "${FUZZ_MATRIX_SEEDS:-16}" >/dev/null
    seeds+=("$work/$t/matrix")
  fi
  start=$(date +%s)
  set +e
  "$build_dir/fuzz/$t" -max_total_time="$seconds" -timeout=60 -rss_limit_mb=4096 -max_len=4096 \
    -artifact_prefix="$work/$t/crashes/" -print_final_stats=1 \
    "$work/$t/corpus" "${seeds[@]}" >"$work/$t/fuzz.log" 2>&1
  trc=$?
  set -e
  runs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$work/$t/fuzz.log" | grep -Eo '[0-9]+$' || echo '?')
  cov=$(grep -Eo 'cov: [0-9]+' "$work/$t/fuzz.log" | tail -1 | grep -Eo '[0-9]+' || echo '?')
  if ((trc != 0)); then
    rc=1
    summary+=("$(printf '%-16s CRASH  %5ss  %s runs  cov %s  (%s)' "$t" $(( $(date +%s) - start )) "$runs" "$cov" "$work/$t/crashes")")
    grep -E 'ERROR|fuzz_[a-z_]+:|SUMMARY' "$work/$t/fuzz.log" | head -5
  else
    summary+=("$(printf '%-16s ok     %5ss  %s runs  cov %s' "$t" $(( $(date +%s) - start )) "$runs" "$cov")")
  fi
done
printf '%s\n' "== fuzz summary (${seconds} s per target)" "${summary[@]}"
exit $rc
