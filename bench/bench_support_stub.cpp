// The benchmark's GPU timing support in a build without CUDA: every call reports that the
// device is unavailable (CLI exit status 3), never a crash.
#include "bench/bench_support.h"

namespace pagedattn::cuda::bench {
Result<std::vector<double>> time_call(int, const Call&, const TimingOptions&, bool) {
  return Status(StatusCode::kDeviceUnavailable, "this pagedattn build has no CUDA backend");
}
Result<double> read_ceiling_gbps(int, std::size_t, int, L2Flush) {
  return Status(StatusCode::kDeviceUnavailable, "this pagedattn build has no CUDA backend");
}
Status fill_uniform(void*, DType, std::size_t, std::uint64_t, float, float) {
  return Status(StatusCode::kDeviceUnavailable, "this pagedattn build has no CUDA backend");
}
Status memset_2d(void*, std::size_t, int, std::size_t, std::size_t) {
  return Status(StatusCode::kDeviceUnavailable, "this pagedattn build has no CUDA backend");
}
Result<DeviceSummary> device_summary(int) {
  return Status(StatusCode::kDeviceUnavailable, "this pagedattn build has no CUDA backend");
}
}  // namespace pagedattn::cuda::bench
