// GPU timing support for `pagedattn bench` (DESIGN.md §6): CUDA-event timing with the L2
// flushed before each call, CUDA-graph replay timing, the read-bandwidth ceiling kernel and a
// device-side random fill. Host-only declarations; without CUDA every function returns
// kDeviceUnavailable (src/cuda/cuda_stub.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "pagedattn/status.h"
#include "pagedattn/tensor.h"

namespace pagedattn::cuda::bench {

/// A call to time; it enqueues its work on `stream` and returns its status.
using Call = std::function<Status(void* stream)>;

struct TimingOptions {
  int warmup = 10;
  int iters = 100;
  /// Overwrite a buffer of twice the L2 size before each timed call, so every call reads its
  /// inputs from HBM as a serving step does (different layers' caches never share L2).
  bool flush_l2 = true;
};

/// Per-call device times in microseconds (CUDA events around each call, on one stream).
/// `graph`: the call is captured once into a CUDA graph and each timed call is one graph
/// replay (launch overhead as a serving engine with graphs sees it).
Result<std::vector<double>> time_call(int device, const Call& call, const TimingOptions& options,
                                      bool graph);

/// Measured read ceiling in GB/s: median over `iters` runs of a kernel that reads `bytes`
/// (>= 4 GB recommended) of random data with 16-byte loads, 4 independent loads in flight per
/// thread, a few CTAs per SM, and one small write per CTA.
Result<double> read_ceiling_gbps(int device, std::size_t bytes, int iters);

/// Fill `count` elements of device memory of `dtype` with uniform values in [lo, hi), from a
/// counter-based hash of (seed, index) (no zeros: timings on zeros flatter kernels).
Status fill_uniform(void* device_ptr, DType dtype, std::size_t count, std::uint64_t seed,
                    float lo, float hi);

/// Device name, SM count, L2 bytes and memory clock for the report.
struct DeviceSummary {
  std::string name;
  int sms = 0;
  std::int64_t l2_bytes = 0;
  std::int64_t memory_bytes = 0;
};
Result<DeviceSummary> device_summary(int device);

}  // namespace pagedattn::cuda::bench
