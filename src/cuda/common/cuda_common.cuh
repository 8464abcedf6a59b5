// Shared pieces of the CUDA backend: error translation, the current-device guard, element
// conversions (exact dequantisation; stores through src/core/numeric.h so that every GPU writer
// is bitwise equal to the CPU one) and small device helpers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "pagedattn/status.h"
#include "pagedattn/tensor.h"
#include "src/core/numeric.h"

namespace pagedattn::cuda {

/// kInternal with the CUDA error string, naming what failed.
inline Status cuda_error(cudaError_t err, const char* what) {
  return Status(StatusCode::kInternal, std::string(what) + ": " + cudaGetErrorName(err) + " (" +
                                           cudaGetErrorString(err) + ")");
}

#define PA_CUDA_RETURN(expr, what)                                  \
  do {                                                              \
    cudaError_t pa_err_ = (expr);                                   \
    if (pa_err_ != cudaSuccess) return ::pagedattn::cuda::cuda_error(pa_err_, what); \
  } while (0)

/// Makes `index` the current device for the scope and restores the caller's device after
/// (index < 0: leaves the current device alone).
class DeviceGuard {
 public:
  // Every entry point that launches starts with a DeviceGuard, and each launch is checked with
  // cudaGetLastError(), which also returns an error left by any earlier runtime call of this
  // thread (the caller's own, a failed device query): discard that here, so that a call reports
  // only its own failures. A sticky error (a faulted context) still fails every later call.
  explicit DeviceGuard(int index) {
    (void)cudaGetLastError();
    if (index < 0) return;
    if (cudaGetDevice(&prev_) != cudaSuccess) {
      (void)cudaGetLastError();
      prev_ = -1;
      status_ = cudaErrorNoDevice;
      return;
    }
    if (prev_ != index) {
      status_ = cudaSetDevice(index);
      if (status_ != cudaSuccess) {
        (void)cudaGetLastError();  // the failure is status(), not a later launch's error
        prev_ = -1;
      }
    } else {
      prev_ = -1;
    }
  }
  ~DeviceGuard() {
    if (prev_ >= 0) cudaSetDevice(prev_);
  }
  cudaError_t status() const { return status_; }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = -1;
  cudaError_t status_ = cudaSuccess;
};

/// Opt-in shared memory limit of the current device (cached per device).
cudaError_t device_smem_optin(int device, int* bytes);

// ------------------------------------------------------------------ element conversions

/// Cache-element kinds used as a template argument: the same dtype as the query, or fp8.
enum : int { kKvSame = 0, kKvE4M3 = 1, kKvE5M2 = 2 };

template <class T>
__device__ __forceinline__ float to_float(T v);
template <>
__device__ __forceinline__ float to_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ float to_float<__half>(__half v) {
  return __half2float(v);
}
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

/// Store `v` rounded (RNE) to T through numeric.h: the same bits as the CPU's store_from_float.
template <class T>
__device__ __forceinline__ void store_rounded(T* p, float v);
template <>
__device__ __forceinline__ void store_rounded<float>(float* p, float v) {
  *p = v;
}
template <>
__device__ __forceinline__ void store_rounded<__half>(__half* p, float v) {
  *reinterpret_cast<std::uint16_t*>(p) = numeric::float_to_half_bits(v);
}
template <>
__device__ __forceinline__ void store_rounded<__nv_bfloat16>(__nv_bfloat16* p, float v) {
  *reinterpret_cast<std::uint16_t*>(p) = numeric::float_to_bf16_bits(v);
}

/// Storage of a cache of kind KV for query type Q.
template <class Q, int KV>
struct CacheTraits {
  using T = Q;
  static constexpr int kBytes = sizeof(Q);
};
template <class Q>
struct CacheTraits<Q, kKvE4M3> {
  using T = std::uint8_t;
  static constexpr int kBytes = 1;
};
template <class Q>
struct CacheTraits<Q, kKvE5M2> {
  using T = std::uint8_t;
  static constexpr int kBytes = 1;
};

/// The dequantisation scale of KV head `kv_head`: the device tensor's value when the cache has
/// one (KVCache::k_scales / v_scales, filled by fill_cache_scales), else the host scalar.
__device__ __forceinline__ float cache_scale(const float* scales, int scales_stride, int kv_head,
                                             float host_scale) {
  return scales != nullptr ? __ldg(scales + static_cast<long long>(kv_head) * scales_stride)
                           : host_scale;
}

/// Two fp8 codes (low byte first) to two floats, exactly (every fp8 value is an fp16 value).
template <int KV>
__device__ __forceinline__ float2 fp8x2_to_float2(std::uint16_t two) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two),
                                                   KV == kKvE4M3 ? __NV_E4M3 : __NV_E5M2);
  __half2 hh;
  hh = *reinterpret_cast<const __half2*>(&h);
  return __half22float2(hh);
}

/// Convert the 16 bytes of `raw` (cache elements) into 16 / kBytes floats.
template <class Q, int KV>
__device__ __forceinline__ void convert16(const uint4& raw, float* f) {
  const std::uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
  if constexpr (KV == kKvE4M3 || KV == kKvE5M2) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 a = fp8x2_to_float2<KV>(static_cast<std::uint16_t>(w[i] & 0xFFFFu));
      const float2 b = fp8x2_to_float2<KV>(static_cast<std::uint16_t>(w[i] >> 16));
      f[4 * i + 0] = a.x;
      f[4 * i + 1] = a.y;
      f[4 * i + 2] = b.x;
      f[4 * i + 3] = b.y;
    }
  } else if constexpr (std::is_same<Q, float>::value) {
#pragma unroll
    for (int i = 0; i < 4; ++i) f[i] = __uint_as_float(w[i]);
  } else if constexpr (std::is_same<Q, __half>::value) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const __half2 h = *reinterpret_cast<const __half2*>(&w[i]);
      const float2 v = __half22float2(h);
      f[2 * i] = v.x;
      f[2 * i + 1] = v.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      f[2 * i] = __uint_as_float(w[i] << 16);
      f[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
    }
  }
}

/// Load two consecutive cache elements at `p` (aligned to two elements) as floats.
template <class Q, int KV>
__device__ __forceinline__ float2 load_pair(const unsigned char* p) {
  if constexpr (KV == kKvE4M3 || KV == kKvE5M2) {
    return fp8x2_to_float2<KV>(*reinterpret_cast<const std::uint16_t*>(p));
  } else if constexpr (std::is_same<Q, float>::value) {
    return *reinterpret_cast<const float2*>(p);
  } else if constexpr (std::is_same<Q, __half>::value) {
    return __half22float2(*reinterpret_cast<const __half2*>(p));
  } else {
    const std::uint32_t w = *reinterpret_cast<const std::uint32_t*>(p);
    return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xFFFF0000u));
  }
}

/// A launch configuration of `grid` CTAs of `threads` threads with `smem_bytes` of dynamic
/// shared memory on `stream`, in thread-block clusters of `cluster_x` CTAs along x (sm_90).
/// `attr` receives the cluster attribute the configuration points to, so it must outlive
/// every use of the configuration (cudaLaunchKernelEx, cudaOccupancyMaxActiveClusters).
inline cudaLaunchConfig_t x_cluster_config(dim3 grid, unsigned threads, std::size_t smem_bytes,
                                           unsigned cluster_x, cudaStream_t stream,
                                           cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem_bytes;
  cfg.stream = stream;
  attr->id = cudaLaunchAttributeClusterDimension;
  attr->val.clusterDim.x = cluster_x;
  attr->val.clusterDim.y = 1;
  attr->val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cfg;
}

// ------------------------------------------------------------------ warp helpers

/// The value an online softmax subtracts before exponentiating, given the running maximum `m`
/// of the scores seen so far (fmaxf, so NaN scores never raise it): `m` itself, or 0 while
/// it is still -inf. A row whose scores so far are all -inf (masked) then gets exp(-inf - 0)
/// = 0 weights without a select per score, and a row whose scores are all NaN (a NaN query,
/// inf x 0 in a dot product) gets NaN weights, hence a NaN output and LSE, as the oracle
/// (reference_attention) does. Testing `m == -inf` per score and skipping the row, as the
/// kernels did before, silently turned such a row into output 0 and LSE -inf. Every partial
/// state whose maximum is -inf then holds only 0s or NaNs, so the factor exp(m - base)
/// that later rescales it may be anything finite.
__device__ __forceinline__ float softmax_base(float m) { return m == -INFINITY ? 0.f : m; }

/// 2^x with flush-to-zero: one MUFU.EX2 (2^-inf = 0), where exp2f without --use_fast_math
/// adds the denormal range's scaling around it. The kernels keep scores in log2 units (scale *
/// log2(e) folded into one multiply), as FlashAttention-2 does; a probability below 2^-126
/// becomes 0, far below what a row sum of at least 1 (its maximum's 2^0) can resolve.
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}


__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}

// ------------------------------------------------------------------ cp.async

__device__ __forceinline__ std::uint32_t smem_addr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}
template <int kBytes>
__device__ __forceinline__ void cp_async(void* smem_dst, const void* gmem_src) {
  static_assert(kBytes == 4 || kBytes == 8 || kBytes == 16, "cp.async size");
  if constexpr (kBytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(smem_dst)),
                 "l"(gmem_src));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(smem_addr(smem_dst)),
                 "l"(gmem_src), "n"(kBytes));
  }
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

}  // namespace pagedattn::cuda
