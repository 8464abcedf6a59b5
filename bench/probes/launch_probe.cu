// Probe: the floor under W7 (one 1024-token decode, a latency-bound call). How long does a
// call take, timed exactly as `pagedattn bench` times W7 (CUDA events around one graph replay,
// the L2 flushed clean before each call), when it does nothing but launch its grid, or nothing
// but N dependent global-memory round trips? The intercept is the launch floor every
// single-call kernel pays, the slope the cost of each dependent round trip from HBM after a
// flush; docs/performance.md uses them to say what W7's 11 us are made of.
//
//   cmake --build build-gpu --target pagedattn_launch_probe && build-gpu/pagedattn_launch_probe
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench/bench_support.h"
#include "bench/probes/probe_check.h"
#include "bench/runner.h"
#include "src/cuda/common/cuda_common.cuh"

namespace {

/// Thread 0 of each CTA follows `hops` links of a random chain (each link on its own 128-byte
/// line, each CTA starting at its own link), so every hop is one dependent round trip. kCluster:
/// the CTAs form clusters (of the launch's size) and then pass two cluster barriers, as the
/// decode kernel's cluster merge did before v11.
template <bool kCluster>
__global__ void chase_kernel(const int* __restrict__ next, int hops, int* out) {
  extern __shared__ int smem[];
  __shared__ int s_v;
  if (threadIdx.x == 0) {
    int i = static_cast<int>(blockIdx.x) * 32 * 97;
    for (int h = 0; h < hops; ++h) i = next[i];
    s_v = i;
  }
  __syncthreads();
  if constexpr (kCluster) {
    for (int b = 0; b < 2; ++b)
      asm volatile(
          "barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::
              : "memory");
  }
  if (s_v == -12345) out[blockIdx.x] = s_v + smem[0];
}

}  // namespace

int main() {
  using namespace pagedattn::cuda::bench;
  constexpr int kLinks = 1 << 22;  // 16 MB of ints, one link per 32 ints (a 128-byte line)
  std::vector<int> host(kLinks, 0);
  {
    // A random cycle over the line-aligned slots.
    std::vector<int> slots(kLinks / 32);
    for (int i = 0; i < static_cast<int>(slots.size()); ++i) slots[i] = i * 32;
    unsigned long long x = 88172645463325252ull;
    for (int i = static_cast<int>(slots.size()) - 1; i > 0; --i) {
      x ^= x << 13; x ^= x >> 7; x ^= x << 17;
      std::swap(slots[i], slots[x % (i + 1)]);
    }
    for (std::size_t i = 0; i < slots.size(); ++i) host[slots[i]] = slots[(i + 1) % slots.size()];
    // Each CTA starts at its own slot (b * 32 * 97), which must be on the cycle: every slot is.
  }
  int* next = nullptr;
  int* out = nullptr;
  CK(cudaMalloc(&next, kLinks * sizeof(int)));
  CK(cudaMalloc(&out, 1024 * sizeof(int)));
  CK(cudaMemcpy(next, host.data(), kLinks * sizeof(int), cudaMemcpyHostToDevice));
  const int smem_big = 97 * 1024;  // the head-128 decode kernel's dynamic shared memory
  CK(cudaFuncSetAttribute(chase_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          smem_big));
  CK(cudaFuncSetAttribute(chase_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          smem_big));

  // How many clusters of 8 and 16 CTAs (97 KB, 128 threads each) fit at once: a 1024-token
  // call cut into 16 one-tile splits per KV head would need 8 co-resident clusters of 16.
  CK(cudaFuncSetAttribute(chase_kernel<true>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  for (const int csize : {8, 16}) {
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = pagedattn::cuda::x_cluster_config(
        dim3(csize * 8), 128, smem_big, static_cast<unsigned>(csize), nullptr, &attr);
    int n = 0;
    const cudaError_t e = cudaOccupancyMaxActiveClusters(&n, chase_kernel<true>, &cfg);
    std::printf("clusters of %d CTAs (97 KB each) resident at once: %d (%s)\n", csize, n,
                cudaGetErrorString(e));
  }
  std::printf("median us of 200 calls, 64 CTAs x 128 threads; graph = one graph replay per call\n");
  std::printf("%-28s %-6s %5s %10s %10s\n", "kernel", "flush", "hops", "plain", "graph");
  for (const L2Flush flush : {L2Flush::kClean, L2Flush::kNone})
    for (const int variant : {0, 1, 2})
      for (const int hops : {0, 1, 2, 3, 4, 6}) {
        static const char* const kNames[] = {"chase, no smem", "chase, 97 KB smem",
                                             "chase, cluster 8, 97 KB"};
        const char* name = kNames[variant];
        const int smem = variant == 0 ? 0 : smem_big;
        Call call = [&](void* s) -> pagedattn::Status {
          cudaStream_t st = static_cast<cudaStream_t>(s);
          if (variant < 2) {
            chase_kernel<false><<<64, 128, smem, st>>>(next, hops, out);
          } else {
            cudaLaunchAttribute attr;
            const cudaLaunchConfig_t cfg =
                pagedattn::cuda::x_cluster_config(dim3(64), 128, smem, 8, st, &attr);
            CK(cudaLaunchKernelEx(&cfg, chase_kernel<true>, static_cast<const int*>(next),
                                  hops, out));
          }
          CK(cudaGetLastError());
          return pagedattn::Status::Ok();
        };
        double r[2];
        for (int graph = 0; graph < 2; ++graph) {
          auto t = time_call(0, call, TimingOptions{10, 200, flush}, graph == 1);
          if (!t.ok()) {
            std::printf("error: %s\n", t.status().message().c_str());
            return 1;
          }
          r[graph] = pagedattn::bench::median_of(*t);
        }
        std::printf("%-28s %-6s %5d %10.2f %10.2f\n", name, to_string(flush), hops, r[0], r[1]);
      }
  cudaFree(next);
  cudaFree(out);
  return 0;
}
