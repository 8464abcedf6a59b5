// CPU-only builds: the CUDA steps of context parallelism report that there is no CUDA.
#include <string>

#include "src/dist/cp_merge.h"

namespace pagedattn::dist::detail {

Status cuda_prepare(const TensorView&, std::int32_t*, std::int32_t*, Stream) {
  return Status(StatusCode::kDeviceUnavailable, "this build has no CUDA backend");
}
Status cuda_merge(const unsigned char*, const SlotLayout&, const TensorView&, const TensorView&,
                  const TensorView&, Stream) {
  return Status(StatusCode::kDeviceUnavailable, "this build has no CUDA backend");
}

Status cuda_check_device(int device) {
  return Status(StatusCode::kDeviceUnavailable,
                "cuda:" + std::to_string(device) + ": this build has no CUDA backend");
}
Status cuda_copy_async(void*, const void*, std::size_t, int, Stream) {
  return Status(StatusCode::kDeviceUnavailable, "this build has no CUDA backend");
}
Status cuda_stream_wait(int, Stream) {
  return Status(StatusCode::kDeviceUnavailable, "this build has no CUDA backend");
}

}  // namespace pagedattn::dist::detail
