// CUDA steps of the context-parallel decode (src/dist/cp_merge.h): the lengths' copy before
// the local attention and the W-way log-sum-exp merge after the all-gather. One kernel each,
// no templates (the dtype is a runtime switch): they move a few MB at most.
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "src/core/numeric.h"
#include "src/cuda/common/cuda_common.cuh"
#include "src/dist/cp_merge.h"

namespace pagedattn::dist::detail {
namespace {

__global__ void prepare_kernel(const std::int32_t* seq_lens, std::int64_t stride, std::int64_t n,
                               std::int32_t* adjusted, std::int32_t* lens) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const std::int32_t len = seq_lens[i * stride];
  lens[i] = len;
  adjusted[i] = len > 0 ? len : 1;
}

__device__ __forceinline__ float load_elem(const unsigned char* base, int dtype, std::int64_t i) {
  if (dtype == static_cast<int>(DType::kFloat32)) return reinterpret_cast<const float*>(base)[i];
  const std::uint16_t b = reinterpret_cast<const std::uint16_t*>(base)[i];
  return dtype == static_cast<int>(DType::kFloat16) ? numeric::half_bits_to_float(b)
                                                    : numeric::bf16_bits_to_float(b);
}

__device__ __forceinline__ void store_elem(void* base, int dtype, std::int64_t i, float v) {
  if (dtype == static_cast<int>(DType::kFloat32)) {
    static_cast<float*>(base)[i] = v;
  } else if (dtype == static_cast<int>(DType::kFloat16)) {
    static_cast<std::uint16_t*>(base)[i] = numeric::float_to_half_bits(v);
  } else {
    static_cast<std::uint16_t*>(base)[i] = numeric::float_to_bf16_bits(v);
  }
}

struct MergeParams {
  const unsigned char* gathered;
  std::size_t slot_bytes, lse_offset, lens_offset;
  int world, dtype;
  std::int64_t num_heads, head_size;
  const float* sinks;  // null = none
  std::int64_t sink_stride;
  void* out;
  std::int64_t out_s0, out_s1;
  float* lse;  // null = not written
  std::int64_t lse_s0, lse_s1;
};

// One block per (token, head) row, one thread per output element of it (looping when D
// exceeds the block). Every thread recomputes the row's max and denominator over the W ranks
// in rank order: W is small, and this keeps the merge free of shared memory and identical on
// every rank.
__global__ void merge_kernel(MergeParams p) {
  const std::int64_t row = blockIdx.x;
  const std::int64_t t = row / p.num_heads, h = row % p.num_heads;
  const float neg_inf = -INFINITY;
  float m = neg_inf;
  bool nan = false;
  for (int r = 0; r < p.world; ++r) {
    const unsigned char* slot = p.gathered + r * p.slot_bytes;
    if (reinterpret_cast<const std::int32_t*>(slot + p.lens_offset)[t] == 0) continue;
    const float x = reinterpret_cast<const float*>(slot + p.lse_offset)[row];
    nan |= x != x;
    if (x > m) m = x;
  }
  const float sink = p.sinks ? p.sinks[h * p.sink_stride] : neg_inf;
  if (sink > m) m = sink;
  const std::int64_t out_base = t * p.out_s0 + h * p.out_s1;
  if (nan || m == neg_inf) {
    const float v = nan ? NAN : 0.0f;
    for (std::int64_t d = threadIdx.x; d < p.head_size; d += blockDim.x)
      store_elem(p.out, p.dtype, out_base + d, v);
    if (threadIdx.x == 0 && p.lse) p.lse[t * p.lse_s0 + h * p.lse_s1] = nan ? NAN : neg_inf;
    return;
  }
  float den = sink == neg_inf ? 0.0f : expf(sink - m);
  for (int r = 0; r < p.world; ++r) {
    const unsigned char* slot = p.gathered + r * p.slot_bytes;
    if (reinterpret_cast<const std::int32_t*>(slot + p.lens_offset)[t] == 0) continue;
    den += expf(reinterpret_cast<const float*>(slot + p.lse_offset)[row] - m);
  }
  const float inv = 1.0f / den;
  for (std::int64_t d = threadIdx.x; d < p.head_size; d += blockDim.x) {
    float acc = 0.0f;
    for (int r = 0; r < p.world; ++r) {
      const unsigned char* slot = p.gathered + r * p.slot_bytes;
      if (reinterpret_cast<const std::int32_t*>(slot + p.lens_offset)[t] == 0) continue;
      const float w = expf(reinterpret_cast<const float*>(slot + p.lse_offset)[row] - m);
      acc += w * load_elem(slot, p.dtype, row * p.head_size + d);
    }
    store_elem(p.out, p.dtype, out_base + d, acc * inv);
  }
  if (threadIdx.x == 0 && p.lse) p.lse[t * p.lse_s0 + h * p.lse_s1] = m + logf(den);
}

}  // namespace

Status cuda_prepare(const TensorView& seq_lens, std::int32_t* adjusted, std::int32_t* lens,
                    Stream stream) {
  const std::int64_t n = seq_lens.shape[0];
  if (n == 0) return Status::Ok();
  cuda::DeviceGuard guard(seq_lens.device.index);
  PA_CUDA_RETURN(guard.status(), "context parallel prepare: cudaSetDevice");
  const int threads = 256;
  const unsigned blocks = static_cast<unsigned>((n + threads - 1) / threads);
  prepare_kernel<<<blocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const std::int32_t*>(seq_lens.data), seq_lens.strides[0], n, adjusted, lens);
  PA_CUDA_RETURN(cudaGetLastError(), "context parallel prepare kernel launch");
  return Status::Ok();
}

Status cuda_merge(const unsigned char* gathered, const SlotLayout& l, const TensorView& sinks,
                  const TensorView& out, const TensorView& lse, Stream stream) {
  const std::int64_t rows = l.num_seqs * l.num_heads;
  if (rows == 0) return Status::Ok();
  if (rows > 0x7FFFFFFF)
    return Status(StatusCode::kUnsupported, "context parallel merge: more than 2^31 - 1 rows");
  cuda::DeviceGuard guard(out.device.index);
  PA_CUDA_RETURN(guard.status(), "context parallel merge: cudaSetDevice");
  MergeParams p{};
  p.gathered = gathered;
  p.slot_bytes = l.slot_bytes;
  p.lse_offset = l.lse_offset;
  p.lens_offset = l.lens_offset;
  p.world = l.world;
  p.dtype = static_cast<int>(l.dtype);
  p.num_heads = l.num_heads;
  p.head_size = l.head_size;
  p.sinks = sinks.defined() ? static_cast<const float*>(sinks.data) : nullptr;
  p.sink_stride = sinks.defined() ? sinks.strides[0] : 0;
  p.out = out.data;
  p.out_s0 = out.strides[0];
  p.out_s1 = out.strides[1];
  p.lse = lse.defined() ? static_cast<float*>(lse.data) : nullptr;
  p.lse_s0 = lse.defined() ? lse.strides[0] : 0;
  p.lse_s1 = lse.defined() ? lse.strides[1] : 0;
  const int threads = l.head_size >= 128 ? 128 : static_cast<int>((l.head_size + 31) / 32 * 32);
  merge_kernel<<<static_cast<unsigned>(rows), threads, 0, static_cast<cudaStream_t>(stream)>>>(p);
  PA_CUDA_RETURN(cudaGetLastError(), "context parallel merge kernel launch");
  return Status::Ok();
}

Status cuda_check_device(int device) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    count = 0;
  }
  if (device < 0 || device >= count)
    return Status(StatusCode::kDeviceUnavailable,
                  "cuda:" + std::to_string(device) + ": this machine has " +
                      std::to_string(count) + " CUDA devices");
  return Status::Ok();
}

Status cuda_copy_async(void* dst, const void* src, std::size_t bytes, int device, Stream stream) {
  if (bytes == 0) return Status::Ok();
  cuda::DeviceGuard guard(device);
  PA_CUDA_RETURN(guard.status(), "thread communicator: cudaSetDevice");
  PA_CUDA_RETURN(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                                 static_cast<cudaStream_t>(stream)),
                 "thread communicator: cudaMemcpyAsync");
  return Status::Ok();
}

Status cuda_stream_wait(int device, Stream stream) {
  cuda::DeviceGuard guard(device);
  PA_CUDA_RETURN(guard.status(), "thread communicator: cudaSetDevice");
  PA_CUDA_RETURN(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)),
                 "thread communicator: cudaStreamSynchronize");
  return Status::Ok();
}

}  // namespace pagedattn::dist::detail
