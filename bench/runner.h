// Running one benchmark workload on a GPU: build the cache (random data, blocks in a random
// permutation), plan once, time run_attention with the L2 flushed before each call.
#pragma once

#include <cstdint>
#include <string>

#include "bench/bench_support.h"
#include "bench/check.h"
#include "bench/workloads.h"
#include "pagedattn/select.h"

namespace pagedattn::bench {

struct BenchResult {
  Workload workload;
  double median_us = 0;
  double p10_us = 0;
  double p90_us = 0;
  double graph_median_us = -1;  // < 0: not measured
  std::int64_t bytes = 0;       // useful_bytes()
  double gbps = 0;              // bytes / median time
  double pct_of_ceiling = 0;    // 100 * gbps / ceiling
  double tflops = 0;            // attention_flops() / median time, 1e12 FLOP/s
  KernelChoice choice;
  int iters = 0;                // timed calls behind the median
  /// The output check made before timing (mode kNone: not checked). A failed check leaves
  /// the timing fields 0: the workload is not timed.
  CheckReport check;
};

/// How run_workload checks and times a workload beyond TimingOptions.
struct RunOptions {
  /// Compare one call's output with the oracle before timing (bench/check.h).
  CheckMode check = CheckMode::kNone;
  /// > 0: the timed calls are cut so that they take about this many milliseconds of kernel
  /// time (at least min_iters, at most TimingOptions::iters), from a median of 3 calls timed
  /// first. A matrix of hundreds of rows, some of 100 ms per call, fits in minutes.
  double budget_ms = 0;
  int min_iters = 5;
};

/// Time `w` on CUDA device `device`. `ceiling_gbps` (> 0) is the read ceiling measured in the
/// same run; `options` go to plan_attention (default: the selection function decides). With
/// `run.check` other than kNone the cache memory no call may read (unused blocks, page
/// padding, the slots past each sequence's last token) is set to NaN and one call's output is
/// compared with the oracle first; a mismatch returns the result with check.pass false and
/// nothing timed.
/// Errors: allocation, planning or CUDA failures, as Status.
Result<BenchResult> run_workload(const Workload& w, int device,
                                 const cuda::bench::TimingOptions& timing, double ceiling_gbps,
                                 std::uint64_t seed, const PlanOptions& options = {},
                                 const RunOptions& run = {});

/// Median of a sample (0 for an empty one).
double median_of(std::vector<double> v);
/// The q-quantile (0..1) by nearest rank.
double quantile_of(std::vector<double> v, double q);

}  // namespace pagedattn::bench
