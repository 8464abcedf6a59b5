// Probe: how fast can a decode-shaped CTA stream K/V into shared memory on this GPU, as a
// function of the copy mechanism (16-byte cp.async per lane vs bulk copies through the Hopper
// copy engine), the stages in flight, the per-tile work that follows each copy, the access
// pattern and the number of CTAs? No attention math: each warp copies its own tiles and, per
// tile, reads one 16-byte word per lane and spins `delay` cycles (a stand-in for the MMAs and
// softmax of a tile). Compared with plain 16-byte loads at full occupancy (the read ceiling of
// `pagedattn bench`) it separates "the copy pipeline cannot pull more" from "the kernel's
// other work is in the way"; docs/performance.md quotes its results.
//
//   cmake --build build-gpu --target pagedattn_stream_probe && build-gpu/pagedattn_stream_probe
//   (or: nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a bench/probes/stream_probe.cu)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "probe_check.h"

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__global__ void ld_kernel(const int4* __restrict__ p, std::size_t n, int* out) {
  int acc = 0;
  const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
  for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += 4 * stride) {
    int4 a[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) a[k] = i + k * stride < n ? __ldcs(p + i + k * stride) : int4{};
#pragma unroll
    for (int k = 0; k < 4; ++k) acc ^= a[k].x ^ a[k].w;
  }
  if (acc == 0x7fffffff) out[0] = acc;
}

struct Args {
  const char* src;
  long long cta_bytes;  // contiguous bytes per CTA
  int warp_bytes;       // bytes per warp per tile
  int piece;            // bulk: bytes per bulk copy
  int delay;            // cycles of stand-in work per tile
  int* out;
  int mode;             // cp.async only, see cpasync_kernel
  long long half;       // bytes between the key and the value stream (modes 2, 4)
};

__device__ __forceinline__ void spin(int cycles) {
  if (cycles <= 0) return;
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

// Each warp: tiles t = 0.., bytes [t * 4 * W + warp * W, +W) of the CTA's range, 16 bytes per
// lane per cp.async (512 bytes per warp instruction), STAGES-deep per-warp pipeline.
template <int STAGES>
__global__ void __launch_bounds__(128) cpasync_kernel(Args a) {
  extern __shared__ __align__(128) unsigned char sm[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int W = a.warp_bytes;
  const char* base = a.src + blockIdx.x * a.cta_bytes + warp * W;
  // bit 4 (with bit 2): shared-memory rows padded to 272 bytes, as the decode kernel's nhd
  // tiles (rows not aligned to 128 bytes).
  const int SW = (a.mode & 16) ? W / 256 * 272 : W;  // bytes per warp stage
  const unsigned dst0 = smem_u32(sm) + warp * STAGES * SW;
  const int ntiles = static_cast<int>(a.cta_bytes / (4 * W));
  // mode bit 0: the zero-fill form (src-size operand); bit 1 (without bit 2): keys and values
  // from the two halves of the buffer, each a contiguous stream per CTA, as an hnd cache with
  // large blocks (before this session's probe, bit 1 read every other half tile); bit 2: the decode kernel's nhd pattern: a CTA
  // is one KV head of 8, its 256-byte token rows 2 KB apart (the 8 heads interleaved), each
  // copy instruction 4 rows x 128 bytes; bit 5 (with bit 2): the same for head 64.
  const int mode = a.mode;
  // (bit 3, an L2 evict_first policy on the copies, was measured with commit 0bdb89f's probe:
  // docs/results/stream_probe_evict_first_2026-11-29_h200.txt; it is no longer built.)
  const long long half = a.half;
  // One 16-byte copy in the form the mode asks for.
  auto copy16 = [&](unsigned dst, const char* src) {
    if (mode & 1)
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(16));
    else
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
  };
  auto issue = [&](int t, int st) {
    const unsigned d = dst0 + st * SW + lane * 16;
    if (mode & 4) {
      // CTA c: head c % 8 of region c / 8; warp tile t covers rows nrow * (4t + warp) .. of
      // the region. Bit 5: head 64 (128-byte rows, 1 KB apart).
      const int rb = (mode & 32) ? 128 : 256;  // bytes per token row of one head
      const long long region = (blockIdx.x >> 3) * (a.cta_bytes * 8);
      const int nrow = W / 2 / rb;  // rows per warp tile (K half)
      const long long row0 = (static_cast<long long>(t) * 4 + warp) * nrow;
      for (int i = 0; i < nrow / 4; ++i) {
        const long long row = row0 + (lane >> 3) + 4 * i;
        const char* ks = a.src + region + row * 8 * rb + (blockIdx.x & 7) * rb + (lane & 7) * 16;
        for (int j = 0; j < rb / 128; ++j) {
          const unsigned pitch = (mode & 16) ? 272 : rb;
          const unsigned dk = dst0 + st * SW + ((lane >> 3) + 4 * i) * pitch + (lane & 7) * 16 + j * 128;
          copy16(dk, ks + j * 128);             // key row
          copy16(dk + SW / 2, ks + half + j * 128);  // value row
        }
      }
      return;
    }
    if (mode & 2) {
      // Keys from the first GiB and values from the second, each stream contiguous per CTA.
      const char* ks = a.src + blockIdx.x * (a.cta_bytes / 2) +
                       (static_cast<long long>(t) * 4 + warp) * (W / 2) + lane * 16;
      for (int o = 0; o < W / 2; o += 512) {
        copy16(d + o, ks + o);
        copy16(d + W / 2 + o, ks + half + o);
      }
      return;
    }
    const char* s = base + static_cast<long long>(t) * 4 * W + lane * 16;
    for (int o = 0; o < W; o += 512) copy16(d + o, s + o);
  };
  for (int st = 0; st < STAGES - 1; ++st) {
    if (st < ntiles) issue(st, st);
    asm volatile("cp.async.commit_group;\n" ::);
  }
  int acc = 0;
  for (int t = 0; t < ntiles; ++t) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(STAGES - 2));
    __syncwarp();
    const int nt = t + STAGES - 1;
    if (nt < ntiles) issue(nt, nt % STAGES);
    asm volatile("cp.async.commit_group;\n" ::);
    int v;
    asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(dst0 + (t % STAGES) * SW + lane * 16));
    acc ^= v;
    spin(a.delay);
  }
  if (acc == 0x7fffffff) a.out[0] = acc;
}

// Same tiles, copied by the bulk-copy engine: lane i < W / piece issues piece i of the tile
// with one cp.async.bulk; one mbarrier per stage per warp counts the bytes.
template <int STAGES>
__global__ void __launch_bounds__(128) bulk_kernel(Args a) {
  extern __shared__ __align__(128) unsigned char sm[];
  __shared__ __align__(8) unsigned long long bar[4][STAGES];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int W = a.warp_bytes;
  const char* base = a.src + blockIdx.x * a.cta_bytes + warp * W;
  const unsigned dst0 = smem_u32(sm) + warp * STAGES * W;
  const int ntiles = static_cast<int>(a.cta_bytes / (4 * W));
  const int npieces = W / a.piece;
  if (lane == 0)
    for (int st = 0; st < STAGES; ++st)
      asm volatile("mbarrier.init.shared.b64 [%0], 1;" ::"r"(smem_u32(&bar[warp][st])));
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  __syncwarp();
  auto issue = [&](int t, int st) {
    const unsigned b = smem_u32(&bar[warp][st]);
    if (lane == 0)
      asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(b), "r"(W) : "memory");
    __syncwarp();
    for (int i = lane; i < npieces; i += 32) {
      const char* s = base + static_cast<long long>(t) * 4 * W + i * a.piece;
      const unsigned d = dst0 + st * W + i * a.piece;
      asm volatile(
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(d),
          "l"(s), "r"(a.piece), "r"(b)
          : "memory");
    }
  };
  for (int st = 0; st < STAGES - 1; ++st)
    if (st < ntiles) issue(st, st);
  int acc = 0;
  unsigned phase = 0;  // bit st: parity to wait for on stage st
  for (int t = 0; t < ntiles; ++t) {
    const int st = t % STAGES;
    const unsigned b = smem_u32(&bar[warp][st]);
    const unsigned par = (phase >> st) & 1;
    asm volatile(
        "{\n.reg .pred p;\nW: mbarrier.try_wait.parity.shared.b64 p, [%0], %1;\n@!p bra W;\n}\n" ::"r"(b),
        "r"(par)
        : "memory");
    phase ^= 1u << st;
    __syncwarp();
    const int nt = t + STAGES - 1;
    if (nt < ntiles) issue(nt, nt % STAGES);
    int v;
    asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(dst0 + st * W + lane * 16));
    acc ^= v;
    spin(a.delay);
  }
  if (acc == 0x7fffffff) a.out[0] = acc;
}

// L2 flush before each timed call, as `pagedattn bench` does (a memset of twice the L2:
// it leaves the L2 full of dirty lines that the timed kernel's reads evict).
void* g_flush = nullptr;
std::size_t g_flush_bytes = 0;

template <class F>
float time_ms(F launch, int reps) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  launch();
  CK(cudaDeviceSynchronize());
  std::vector<float> v;
  for (int r = 0; r < reps; ++r) {
    if (g_flush) CK(cudaMemsetAsync(g_flush, r & 0xff, g_flush_bytes));
    CK(cudaEventRecord(e0));
    launch();
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    v.push_back(ms);
  }
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Reads `bytes` (keys and values together in modes 2/4: keys from the buffer's first GiB,
// values from its second, so at most 1 GiB there) and prints the rate.
template <int STAGES>
void run_pipe(bool bulk, const char* src, long long bytes, int ctas, int W, int piece, int delay,
              int* out, int mode = 0) {
  const long long half = 1LL << 30;
  if ((mode & 6) && bytes > half) {
    std::printf("mode %d: at most 1 GiB\n", mode);
    return;
  }
  Args a{src, bytes / ctas / (4LL * W) * (4LL * W), W, piece, delay, out, mode, half};
  const int sw = (mode & 16) ? W / 256 * 272 : W;
  const std::size_t smem = std::size_t{4} * STAGES * sw;
  auto k = bulk ? bulk_kernel<STAGES> : cpasync_kernel<STAGES>;
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  int per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, 128, smem));
  const float ms = time_ms([&] { k<<<ctas, 128, smem>>>(a); }, 10);
  CK(cudaGetLastError());
  const double read = static_cast<double>(a.cta_bytes) * ctas;
  std::printf("mode %2d %-8s stages %d  warp tile %6d B  piece %5d  ctas %5d (%d/SM)  delay %5d  "
              "%.2f GiB  %7.1f us  %7.0f GB/s\n",
              mode, bulk ? "bulk" : "cp.async", STAGES, W, bulk ? piece : 16, ctas, per_sm, delay,
              read / (1 << 30), ms * 1e3, read / ms / 1e6);
}

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const long long total = 2LL << 30;
  char* buf;
  int* out;
  CK(cudaMalloc(&buf, total));
  CK(cudaMalloc(&out, 4));
  CK(cudaMemset(buf, 1, total));
  {
    const std::size_t n = total / 16;
    const float ms = time_ms([&] { ld_kernel<<<sms * 4, 512>>>(reinterpret_cast<const int4*>(buf), n, out); }, 10);
    std::printf("ld.global 16 B, full occupancy (the bench's read ceiling): %.0f GB/s\n", total / ms / 1e6);
  }
  const int w2 = 4 * sms;  // two waves of two CTAs per SM, as W1's 512 CTAs
  std::printf("\n2 GiB, no flush: copy engine, per-tile work, waves\n");
  for (int bulk = 0; bulk < 2; ++bulk)
    for (int delay : {0, 1500, 3000}) {
      run_pipe<3>(bulk, buf, total, w2, 8192, 4096, delay, out);
      run_pipe<3>(bulk, buf, total, w2 / 2, 8192, 4096, delay, out);
    }
  for (int piece : {256, 1024, 8192}) run_pipe<3>(true, buf, total, w2, 8192, piece, 1500, out);
  run_pipe<2>(false, buf, total, w2, 8192, 4096, 1500, out);
  run_pipe<4>(false, buf, total, w2, 4096, 4096, 1500, out);
  std::printf("\n1 GiB, no flush: the decode kernel's access pattern (modes)\n");
  for (int mode : {0, 1, 2, 4, 5, 21}) run_pipe<3>(false, buf, 1LL << 30, w2, 8192, 4096, 1500, out, mode);
  for (int flush = 0; flush < 2; ++flush) {
    if (flush) {
      int l2 = 0;
      CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
      g_flush_bytes = 2 * static_cast<std::size_t>(l2);
      CK(cudaMalloc(&g_flush, g_flush_bytes));
    }
    std::printf("\nW1's size (1 GiB) and pattern (mode 5) in 512 CTAs; one wave; padded shared rows "
                "(21); keys and values each contiguous per CTA (3, an hnd cache with large blocks); "
                "2 GiB (mode 0); the read-ceiling kernel on 1 GiB. L2 flushed before each call: %s\n",
                flush ? "yes (memset of twice the L2, as pagedattn bench)" : "no");
    run_pipe<3>(false, buf, 1LL << 30, 512, 8192, 4096, 1500, out, 5);
    run_pipe<3>(false, buf, 1LL << 30, 2 * sms, 8192, 4096, 1500, out, 5);
    run_pipe<3>(false, buf, 1LL << 30, 512, 8192, 4096, 1500, out, 21);
    run_pipe<3>(false, buf, 1LL << 30, 512, 8192, 4096, 1500, out, 3);
    run_pipe<3>(false, buf, total, 512, 8192, 4096, 1500, out, 0);
    {
      const std::size_t n = (1LL << 30) / 16;
      const float ms =
          time_ms([&] { ld_kernel<<<sms * 4, 512>>>(reinterpret_cast<const int4*>(buf), n, out); }, 10);
      std::printf("ld.global 16 B, full occupancy, 1 GiB: %7.1f us  %7.0f GB/s\n", ms * 1e3,
                  (1LL << 30) / ms / 1e6);
    }
    const float ms = time_ms([&] { ld_kernel<<<1, 32>>>(reinterpret_cast<const int4*>(buf), 32, out); }, 20);
    std::printf("a one-warp kernel reading 512 bytes: %.2f us\n", ms * 1e3);
  }
  std::printf("\nW2's shape (head 64: 128-byte rows, 8 heads interleaved; 0.5 GiB): the kernel's "
              "cut (4 KB warp tiles, 4 stages, 3 CTAs per SM) against 128-token stages (8 KB warp "
              "tiles, 3 stages, 2 CTAs per SM), and W1's shape for reference. L2 flushed: yes\n");
  for (int delay : {0, 700, 1400}) {
    run_pipe<4>(false, buf, 1LL << 29, 1024, 4096, 4096, delay, out, 37);
    run_pipe<3>(false, buf, 1LL << 29, 512, 8192, 4096, 2 * delay, out, 37);
    run_pipe<3>(false, buf, 1LL << 29, 512, 8192, 4096, 2 * delay, out, 5);
  }
  return 0;
}
