// Host-side entry points of the CUDA backend (no CUDA headers here, so core files compile
// without the toolkit). Implemented in src/cuda/backend/ and the kernel folders; stubs
// returning kDeviceUnavailable when the build has no CUDA (src/cuda/backend/cuda_stub.cpp).
#pragma once

#include "pagedattn/attention.h"
#include "pagedattn/kv_cache.h"
#include "pagedattn/select.h"
#include "src/core/internal.h"

namespace pagedattn::cuda {

Result<DeviceInfo> query_device(int index);

/// Fill the backend parts of `state` (state->choice already made) and size the workspace.
Status plan_attention(const AttentionArgs& args, const HostMetadata& host,
                      AttentionPlan::State* state);

Status run_attention(const AttentionPlan::State& plan, const AttentionArgs& args,
                     void* workspace, std::size_t workspace_bytes, Stream stream);

Status write_kv(const TensorView& key, const TensorView& value, const TensorView& slot_mapping,
                const KVCache& cache, const KVCacheGeometry& geometry, Stream stream);

Status merge_attention_states(const TensorView& out_a, const TensorView& lse_a,
                              const TensorView& out_b, const TensorView& lse_b,
                              const TensorView& out, const TensorView& lse_out, Stream stream);

/// Device memory helpers for the convenience paths, the CLI and tests. `device` >= 0: allocate
/// on that device (the calling thread's current device is left as it was), -1: on the current
/// device. device_free frees on the device that owns `ptr`. Errors: kDeviceUnavailable without
/// a device, kInternal with the CUDA error string (cudaMalloc, cudaSetDevice).
Result<void*> device_malloc(std::size_t bytes, int device = -1);
void device_free(void* ptr);

}  // namespace pagedattn::cuda

namespace pagedattn::cuda {
/// Copies between host and device memory (synchronous, on the device that owns the device
/// pointer, so that they are ordered after that device's legacy default stream), and a
/// device-wide synchronise of `device` (-1: the current device); used by the convenience
/// paths, tests and the CLI. The calling thread's current device is left as it was. Errors:
/// kDeviceUnavailable without CUDA, kInternal with the CUDA error string.
Status copy_to_device(void* device_dst, const void* host_src, std::size_t bytes);
Status copy_to_host(void* host_dst, const void* device_src, std::size_t bytes);
Status device_synchronize(int device = -1);
/// Device-to-device copy on the legacy default stream of the device that owns `device_dst`
/// (returns before the copy is done; later work on that stream, and the copies above, are
/// ordered after it). Errors as device_synchronize.
Status copy_device_to_device(void* device_dst, const void* device_src, std::size_t bytes);
/// Free and total bytes of `device` (-1: the current one), as cudaMemGetInfo reports them
/// (the whole device, other processes included). Errors as device_synchronize.
Status device_memory_info(std::size_t* free_bytes, std::size_t* total_bytes, int device = -1);
}  // namespace pagedattn::cuda
