// GPU timing support for `pagedattn bench` (DESIGN.md §6): CUDA-event timing with the L2
// flushed before each call, CUDA-graph replay timing, the read-bandwidth ceiling kernel and a
// device-side random fill. Host-only declarations; without CUDA every function returns
// kDeviceUnavailable (bench/bench_support_stub.cpp). Built into the pagedattn_bench library,
// not into the installed pagedattn library.
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

/// How the L2 is emptied of a call's inputs before each timed call, so that the call reads
/// them from HBM as a serving step does (different layers' caches never share the L2). Both
/// flushing modes write a buffer of twice the L2 size (at least 64 MB).
enum class L2Flush {
  /// Not flushed: inputs smaller than the L2 stay resident from call to call.
  kNone,
  /// The write only (Triton's do_bench method, and the method of the reference numbers of
  /// issue 4). It leaves the L2 full of dirty lines, and the timed call pays their write-back
  /// as it evicts them: 8-9 us for a call of ~1 GB on an H200, 20 us for the read-ceiling
  /// kernel itself on 1 GiB (docs/performance.md).
  kDirty,
  /// The write, then a read of the same buffer that evicts the dirty lines, so that their
  /// write-back happens before the timed call: the call starts from an L2 that holds none of
  /// its inputs and nothing to write back, as the read-ceiling kernel it is compared with.
  kClean,
};

/// "none", "dirty" or "clean".
inline const char* to_string(L2Flush flush) {
  switch (flush) {
    case L2Flush::kNone: return "none";
    case L2Flush::kDirty: return "dirty";
    case L2Flush::kClean: return "clean";
  }
  return "?";
}

struct TimingOptions {
  int warmup = 10;
  int iters = 100;
  L2Flush flush = L2Flush::kClean;
};

/// Per-call device times in microseconds (CUDA events around each call, on one stream).
/// `graph`: the call is captured once into a CUDA graph and each timed call is one graph
/// replay (launch overhead as a serving engine with graphs sees it).
Result<std::vector<double>> time_call(int device, const Call& call, const TimingOptions& options,
                                      bool graph);

/// Measured read ceiling in GB/s: median over `iters` runs of a kernel that reads `bytes`
/// (>= 4 GB recommended) of random data with 16-byte loads, 4 independent loads in flight per
/// thread, a few CTAs per SM, and one small write per CTA (DESIGN.md §6); the fastest of
/// evict-first and normal-priority loads with 2 and 4 CTAs of 512 threads per SM. With
/// `flush` other than kNone each run is timed as the workloads are (the L2 flushed before
/// it): on a read of the size of a workload this shows what the flush itself costs a pure
/// read.
/// Errors: kDeviceUnavailable without CUDA; CUDA allocation or launch failures.
Result<double> read_ceiling_gbps(int device, std::size_t bytes, int iters,
                                 L2Flush flush = L2Flush::kNone);

/// Fill `count` elements of device memory of `dtype` with uniform values in [lo, hi), from a
/// counter-based hash of (seed, index) (no zeros: timings on zeros flatter kernels).
Status fill_uniform(void* device_ptr, DType dtype, std::size_t count, std::uint64_t seed,
                    float lo, float hi);

/// cudaMemset2D on the current device, synchronous: `height` rows of `width` bytes, `pitch`
/// bytes apart, set to the byte `value`. The bench writes 0xFF, which is a NaN in every float
/// dtype it times (fp32, fp16, bf16, fp8 e4m3 and e5m2), into the cache memory a call must not
/// read (unused blocks, page padding, the slots past a sequence's end) before it checks a
/// call's output. Errors: kDeviceUnavailable without CUDA; the CUDA error.
Status memset_2d(void* device_ptr, std::size_t pitch, int value, std::size_t width,
                 std::size_t height);

/// Device name, SM count, L2 bytes and memory clock for the report.
struct DeviceSummary {
  std::string name;
  int sms = 0;
  std::int64_t l2_bytes = 0;
  std::int64_t memory_bytes = 0;
};
Result<DeviceSummary> device_summary(int device);

}  // namespace pagedattn::cuda::bench
