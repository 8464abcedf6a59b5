// sm_90a building blocks of the warpgroup-MMA prefill kernel: shared-memory matrix
// descriptors, the wgmma fence / commit / wait protocol, and the 128-byte-swizzled tile layout
// both GEMM operands use. Layouts follow the PTX ISA ("Asynchronous Warpgroup Level Matrix
// Shared Memory Layout"): a tile of R rows x C 16-bit elements (C a multiple of 64) is stored
// as C/64 column blocks of R rows x 128 bytes; in row r the 16-byte chunk c sits at chunk
// c ^ (r % 8) (the hardware's 128B swizzle: address bits [4,7) XOR bits [7,10), so every
// block starts on a 1024-byte boundary). Read as rows x K this is the K-major canonical layout
// (SBO = 1024 between 8-row groups, LBO unused); read as K x N with N contiguous (a V tile of
// tokens x head dims) it is the MN-major one (LBO = the column-block stride, SBO = 1024).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "src/cuda/prefill/wgmma_ops.cuh"

namespace pagedattn::cuda::wgmma {

/// Element offset of (row r, 16-byte chunk c) in a swizzled tile of `rows` rows.
__host__ __device__ __forceinline__ int tile_off(int r, int c, int rows) {
  return (c >> 3) * rows * 64 + r * 64 + (((c & 7) ^ (r & 7)) << 3);
}

/// Descriptor of a 128B-swizzled operand at shared address `addr` (bytes) with the given
/// leading / stride byte offsets.
__device__ __forceinline__ std::uint64_t desc(std::uint32_t addr, std::uint32_t lbo,
                                              std::uint32_t sbo) {
  return static_cast<std::uint64_t>((addr & 0x3FFFF) >> 4) |
         (static_cast<std::uint64_t>((lbo & 0x3FFFF) >> 4) << 16) |
         (static_cast<std::uint64_t>((sbo & 0x3FFFF) >> 4) << 32) | (std::uint64_t{1} << 62);
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define PA_WGMMA_ASM(...) asm volatile(__VA_ARGS__)
#else
#define PA_WGMMA_ASM(...) \
  do {                    \
  } while (0)
#endif

/// Orders this thread's register writes (accumulators, A fragments) before the next wgmma.
__device__ __forceinline__ void fence() { PA_WGMMA_ASM("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() {
  PA_WGMMA_ASM("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wait() {
  PA_WGMMA_ASM("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/// Generic-proxy writes to shared memory (cp.async, st.shared) become visible to the async
/// proxy that wgmma reads through.
__device__ __forceinline__ void fence_proxy_async() {
  PA_WGMMA_ASM("fence.proxy.async.shared::cta;\n" ::: "memory");
}
/// Keeps the compiler from moving accesses of `r` across a wgmma issue or wait.
template <int N>
__device__ __forceinline__ void fence_operand(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

/// D[64 x N] (+)= A * B for a 16-bit type T (the ops in wgmma_ops.cuh by N and dtype).
template <class T, int N>
__device__ __forceinline__ void ss(float (&d)[N / 2], std::uint64_t da, std::uint64_t db,
                                   int scale_d);
template <class T, int N, int TRANS_B>
__device__ __forceinline__ void rs(float (&d)[N / 2], const unsigned (&a)[4], std::uint64_t db,
                                   int scale_d);

#define PA_WGMMA_SPECIALISE(CT, NAME, N)                                                       \
  template <>                                                                                  \
  __device__ __forceinline__ void ss<CT, N>(float (&d)[N / 2], std::uint64_t da,               \
                                            std::uint64_t db, int scale_d) {                   \
    ss_n##N##_##NAME(d, da, db, scale_d);                                                      \
  }                                                                                            \
  template <>                                                                                  \
  __device__ __forceinline__ void rs<CT, N, 0>(float (&d)[N / 2], const unsigned (&a)[4],      \
                                               std::uint64_t db, int scale_d) {                \
    rs_n##N##_##NAME##_t0(d, a, db, scale_d);                                                  \
  }                                                                                            \
  template <>                                                                                  \
  __device__ __forceinline__ void rs<CT, N, 1>(float (&d)[N / 2], const unsigned (&a)[4],      \
                                               std::uint64_t db, int scale_d) {                \
    rs_n##N##_##NAME##_t1(d, a, db, scale_d);                                                  \
  }
PA_WGMMA_SPECIALISE(__nv_bfloat16, bf16, 64)
PA_WGMMA_SPECIALISE(__nv_bfloat16, bf16, 128)
PA_WGMMA_SPECIALISE(__nv_bfloat16, bf16, 256)
PA_WGMMA_SPECIALISE(__half, f16, 64)
PA_WGMMA_SPECIALISE(__half, f16, 128)
PA_WGMMA_SPECIALISE(__half, f16, 256)
#undef PA_WGMMA_SPECIALISE

}  // namespace pagedattn::cuda::wgmma
