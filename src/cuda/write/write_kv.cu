// CUDA cache writer (vLLM's reshape_and_cache / reshape_and_cache_flash, without their faults):
//  - the token count is slot_mapping's length, never key's (CUDA-graph padding rows ignored);
//  - negative slots are skipped, and so are slots >= num_blocks * block_size, so the kernel is
//    memory-safe even when the host did not validate a device-resident slot mapping;
//  - a grid-stride loop over tokens and a block-stride loop over a token's heads x dims: no
//    assumption on num_kv_heads * head_size versus the block size (vLLM pitfall 16);
//  - the layout decision is decide_cache_access(cache), the one the reader takes: the native
//    split fast path only for dense block-contiguous caches, strided addressing otherwise
//    (padded pages of hybrid models, permuted strides);
//  - same-dtype caches store the input's bits; fp8 caches store fp8(x / scale) through
//    numeric.h, bitwise equal to the CPU writer, with the scale of the token's KV head read on
//    the device when the cache has scale tensors (KVCache::k_scales). All offsets are int64.
#include "src/cuda/backend/cuda_backend.h"
#include "src/cuda/common/cache_index.h"
#include "src/cuda/common/cuda_common.cuh"
#include "src/cuda/common/launch_args.h"

namespace pagedattn::cuda {

namespace {

constexpr int kWriteThreads = 128;

struct WriteParams {
  const void* key;
  std::int64_t k0, k1;  // source key token / head strides (elements)
  const void* value;
  std::int64_t v0, v1;
  const void* slots;
  std::int64_t slot_stride;
  int slot64;
  void* kc;
  void* vc;
  Strides4 ks, vs;
  int layout;
  int x;
  std::int64_t num_blocks;
  std::int64_t block_size;
  int num_kv_heads;
  int head_size;
  float k_scale, v_scale;
  // KVCache::k_scales / v_scales (fill_cache_scales): null = the scalars above.
  const float* k_scales;
  const float* v_scales;
  int scales_stride;
  std::int64_t num_tokens;
};

__device__ __forceinline__ std::int64_t read_slot(const WriteParams& p, std::int64_t i) {
  const std::int64_t off = i * p.slot_stride;
  return p.slot64 ? static_cast<const std::int64_t*>(p.slots)[off]
                  : static_cast<std::int64_t>(static_cast<const std::int32_t*>(p.slots)[off]);
}

/// The stored cache element for source element `v` (type S) into a cache of kind KV.
template <class S, int KV>
struct Store;
template <class S>
struct Store<S, kKvSame> {
  using C = S;
  __device__ __forceinline__ static C convert(S v, float) { return v; }  // the input's bits
};
template <class S>
struct Store<S, kKvE4M3> {
  using C = std::uint8_t;
  __device__ __forceinline__ static C convert(S v, float scale) {
    return numeric::float_to_e4m3(to_float<S>(v) / scale);
  }
};
template <class S>
struct Store<S, kKvE5M2> {
  using C = std::uint8_t;
  __device__ __forceinline__ static C convert(S v, float scale) {
    return numeric::float_to_e5m2(to_float<S>(v) / scale);
  }
};

/// Stride-aware writer: one element (head, dim) per thread iteration, offsets from the cache
/// tensors' strides (any layout, padded pages, permuted strides).
template <class S, int KV>
__global__ void __launch_bounds__(kWriteThreads) write_kv_strided_kernel(const WriteParams p) {
  using C = typename Store<S, KV>::C;
  const S* key = static_cast<const S*>(p.key);
  const S* value = static_cast<const S*>(p.value);
  C* kc = static_cast<C*>(p.kc);
  C* vc = static_cast<C*>(p.vc);
  const int per_token = p.num_kv_heads * p.head_size;
  for (std::int64_t tok = blockIdx.x; tok < p.num_tokens; tok += gridDim.x) {
    const SlotPos pos = decompose_slot(read_slot(p, tok), p.block_size, p.num_blocks);
    if (!pos.ok) continue;  // padding (negative) or out of range: skipped
    for (int i = threadIdx.x; i < per_token; i += blockDim.x) {
      const int h = i / p.head_size;
      const int d = i - h * p.head_size;
      const S kv = key[tok * p.k0 + h * p.k1 + d];
      const S vv = value[tok * p.v0 + h * p.v1 + d];
      // Read at run time (never on the host), so a replayed graph sees changed values.
      const float ksc = cache_scale(p.k_scales, p.scales_stride, h, p.k_scale);
      const float vsc = cache_scale(p.v_scales, p.scales_stride, h, p.v_scale);
      kc[key_offset(p.layout, p.x, p.ks, pos.block, pos.offset, h, d)] =
          Store<S, KV>::convert(kv, ksc);
      vc[value_offset(p.layout, p.vs, pos.block, pos.offset, h, d)] =
          Store<S, KV>::convert(vv, vsc);
    }
  }
}

/// Native split fast path (dense block-contiguous cache, 16-byte aligned): one thread writes
/// one x-chunk of the key as a single 16-byte store and the matching x value elements (which
/// are block_size apart in the split value layout).
template <class S, int KV>
__global__ void __launch_bounds__(kWriteThreads) write_kv_split_native_kernel(const WriteParams p) {
  using C = typename Store<S, KV>::C;
  constexpr int kX = 16 / static_cast<int>(sizeof(C));
  const S* key = static_cast<const S*>(p.key);
  const S* value = static_cast<const S*>(p.value);
  C* kc = static_cast<C*>(p.kc);
  C* vc = static_cast<C*>(p.vc);
  const int chunks_per_head = p.head_size / kX;
  const int chunks = p.num_kv_heads * chunks_per_head;
  for (std::int64_t tok = blockIdx.x; tok < p.num_tokens; tok += gridDim.x) {
    const SlotPos pos = decompose_slot(read_slot(p, tok), p.block_size, p.num_blocks);
    if (!pos.ok) continue;
    for (int i = threadIdx.x; i < chunks; i += blockDim.x) {
      const int h = i / chunks_per_head;
      const int c = i - h * chunks_per_head;
      const int d0 = c * kX;
      union {
        uint4 v;
        C e[kX];
      } kchunk;
      const S* ksrc = key + tok * p.k0 + h * p.k1 + d0;
      const S* vsrc = value + tok * p.v0 + h * p.v1 + d0;
      const float ksc = cache_scale(p.k_scales, p.scales_stride, h, p.k_scale);
      const float vsc = cache_scale(p.v_scales, p.scales_stride, h, p.v_scale);
#pragma unroll
      for (int e = 0; e < kX; ++e) kchunk.e[e] = Store<S, KV>::convert(ksrc[e], ksc);
      // key [b, h, d/x, t, x]: the chunk is x contiguous elements at (b, h, c, offset).
      *reinterpret_cast<uint4*>(kc + key_offset(kLayoutSplit, kX, p.ks, pos.block, pos.offset, h, d0)) =
          kchunk.v;
      // value [b, h, d, t]
      const std::int64_t vbase = value_offset(kLayoutSplit, p.vs, pos.block, pos.offset, h, d0);
#pragma unroll
      for (int e = 0; e < kX; ++e)
        vc[vbase + e * p.vs.s[2]] = Store<S, KV>::convert(vsrc[e], vsc);
    }
  }
}

template <class S, int KV>
cudaError_t launch_writer(const WriteParams& p, bool native, cudaStream_t stream) {
  const std::int64_t grid64 = std::min<std::int64_t>(p.num_tokens, std::int64_t{1} << 20);
  const unsigned grid = static_cast<unsigned>(grid64 > 0 ? grid64 : 1);
  if (native) {
    write_kv_split_native_kernel<S, KV><<<grid, kWriteThreads, 0, stream>>>(p);
  } else {
    write_kv_strided_kernel<S, KV><<<grid, kWriteThreads, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

template <class S>
cudaError_t launch_for_source(const WriteParams& p, DType cache_dtype, bool native,
                              cudaStream_t stream) {
  switch (cache_dtype) {
    case DType::kFloat8E4M3: return launch_writer<S, kKvE4M3>(p, native, stream);
    case DType::kFloat8E5M2: return launch_writer<S, kKvE5M2>(p, native, stream);
    default: return launch_writer<S, kKvSame>(p, native, stream);
  }
}

}  // namespace

Status write_kv(const TensorView& key, const TensorView& value, const TensorView& slot_mapping,
                const KVCache& cache, const KVCacheGeometry& geometry, Stream stream) {
  const std::int64_t num_tokens = slot_mapping.shape[0];
  if (num_tokens == 0) return Status::Ok();
  DeviceGuard guard(cache.key.device.index);
  if (guard.status() != cudaSuccess) return cuda_error(guard.status(), "write_kv: set device");

  WriteParams p{};
  p.key = key.data;
  p.k0 = key.strides[0];
  p.k1 = key.strides[1];
  p.value = value.data;
  p.v0 = value.strides[0];
  p.v1 = value.strides[1];
  p.slots = slot_mapping.data;
  p.slot_stride = slot_mapping.strides[0];
  p.slot64 = slot_mapping.dtype == DType::kInt64 ? 1 : 0;
  p.kc = cache.key.data;
  p.vc = cache.value.data;
  fill_cache_geometry(p, cache, geometry);
  p.num_kv_heads = geometry.num_kv_heads;
  p.head_size = geometry.head_size;
  p.k_scale = is_fp8(geometry.dtype) ? cache.k_scale : 1.0f;
  p.v_scale = is_fp8(geometry.dtype) ? cache.v_scale : 1.0f;
  fill_cache_scales(p, cache);  // validated: only fp8 caches have them
  p.num_tokens = num_tokens;

  // The same decision the attention reader takes (select_writer / decide_cache_access).
  const bool aligned = (reinterpret_cast<std::uintptr_t>(cache.key.data) % 16 == 0) &&
                       (reinterpret_cast<std::uintptr_t>(cache.value.data) % 16 == 0);
  const bool native = cache.layout == KVLayout::kSplit &&
                      decide_cache_access(cache).access == CacheAccess::kNative && aligned &&
                      geometry.head_size % p.x == 0;

  cudaStream_t s = static_cast<cudaStream_t>(stream);
  cudaError_t err = cudaSuccess;
  switch (key.dtype) {
    case DType::kFloat32: err = launch_for_source<float>(p, geometry.dtype, native, s); break;
    case DType::kFloat16: err = launch_for_source<__half>(p, geometry.dtype, native, s); break;
    case DType::kBFloat16:
      err = launch_for_source<__nv_bfloat16>(p, geometry.dtype, native, s);
      break;
    default:
      return Status(StatusCode::kInvalidArgument,
                    std::string("key.dtype = ") + to_string(key.dtype) +
                        ": expected fp32, fp16 or bf16");
  }
  PA_CUDA_RETURN(err, "write_kv launch");
  return Status::Ok();
}

}  // namespace pagedattn::cuda
