// The CUDA backend's entry points in a build without CUDA: every call reports that the device
// is unavailable, so callers get kDeviceUnavailable (CLI exit status 3), never a crash. The
// selection rule (choose_config.cpp) is host code and is built in every build.
#include "src/cuda/backend/cuda_backend.h"

namespace pagedattn::cuda {

namespace {
Status no_cuda() {
  return Status(StatusCode::kDeviceUnavailable,
                "this pagedattn build has no CUDA backend (configure with a CUDA compiler)");
}
}  // namespace

Result<DeviceInfo> query_device(int) { return no_cuda(); }
Status plan_attention(const AttentionArgs&, const HostMetadata&, AttentionPlan::State*) {
  return no_cuda();
}
Status run_attention(const AttentionPlan::State&, const AttentionArgs&, void*, std::size_t,
                     Stream) {
  return no_cuda();
}
Status write_kv(const TensorView&, const TensorView&, const TensorView&, const KVCache&,
                const KVCacheGeometry&, Stream) {
  return no_cuda();
}
Status merge_attention_states(const TensorView&, const TensorView&, const TensorView&,
                              const TensorView&, const TensorView&, const TensorView&, Stream) {
  return no_cuda();
}
Result<void*> device_malloc(std::size_t, int) { return no_cuda(); }
void device_free(void*) {}
Status copy_to_device(void*, const void*, std::size_t) { return no_cuda(); }
Status copy_to_host(void*, const void*, std::size_t) { return no_cuda(); }
Status device_synchronize(int) { return no_cuda(); }
Status device_memory_info(std::size_t*, std::size_t*, int) { return no_cuda(); }
Status copy_device_to_device(void*, const void*, std::size_t) { return no_cuda(); }

}  // namespace pagedattn::cuda
