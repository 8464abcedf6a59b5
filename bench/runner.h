// Running one benchmark workload on a GPU: build the cache (random data, blocks in a random
// permutation), plan once, time run_attention with the L2 flushed before each call.
#pragma once

#include <cstdint>
#include <string>

#include "bench/bench_support.h"
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
};

/// Time `w` on CUDA device `device`. `ceiling_gbps` (> 0) is the read ceiling measured in the
/// same run; `options` go to plan_attention (default: the selection function decides).
/// Errors: allocation, planning or CUDA failures, as Status.
Result<BenchResult> run_workload(const Workload& w, int device,
                                 const cuda::bench::TimingOptions& timing, double ceiling_gbps,
                                 std::uint64_t seed, const PlanOptions& options = {});

/// Median of a sample (0 for an empty one).
double median_of(std::vector<double> v);
/// The q-quantile (0..1) by nearest rank.
double quantile_of(std::vector<double> v, double q);

}  // namespace pagedattn::bench
