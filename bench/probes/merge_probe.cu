// Probe: is there a faster shape for W7 (one 1024-token decode, 8 KV heads, 4 MB of K/V) than
// 64 CTAs in clusters of 8 that merge through distributed shared memory? Each variant does
// what W7's kernel does with memory, without the arithmetic: one dependent metadata load,
// then its share of the 4 MB with 16-byte loads (all issued before any is used), a 2 KB
// partial per CTA (4 query heads x 128 dims of fp32), and a merge of the splits of each KV
// head into 2 KB of output. Timed as `pagedattn bench` times W7 (events around one call after
// the clean flush; plain launch and one graph replay per call), beside the launch floor of
// the same grid. Variants:
//   cluster push   64 CTAs, clusters of 8 (or 128 in clusters of 16): st.async of each
//                  CTA's partial into the CTA that combines it, mbarrier wait (the small-call
//                  kernel's merge)
//   cooperative    128 CTAs, cooperative launch: partials to global memory, grid sync, each
//                  CTA combines a 1/128 slice (the runtime owns the grid barrier's memory)
//   counter        128 CTAs: partials to global memory, the last CTA of a KV head (a counter
//                  per KV head in zero-initialised module memory, reset by that CTA) combines
//   loads only     the grid's loads and one store per CTA (the burst alone)
//   empty          the launch alone, in the cluster shape of the push variants (the floor)
//
//   cmake --build build-gpu --target pagedattn_merge_probe && build-gpu/pagedattn_merge_probe
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <set>
#include <vector>

#include "bench/bench_support.h"
#include "bench/probes/probe_check.h"
#include "bench/runner.h"
#include "src/cuda/decode/decode_common.cuh"

namespace {

namespace dc = pagedattn::cuda::decode;

constexpr int kThreads = 256;
constexpr int kHeads = 8;              // KV heads of W7
constexpr int kPartial = 512;          // floats per CTA partial: 4 query heads x 128 dims
constexpr std::size_t kBytes = 4u << 20;  // W7's K and V

enum Mode { kLoadsOnly = 0, kClusterPush = 1, kCooperative = 2, kCounter = 3, kEmpty = 4 };

__device__ unsigned g_counter[kHeads];  // zero at module load; the last CTA resets its entry

template <int N>  // 16-byte loads per thread
__device__ __forceinline__ void load_share(const uint4* __restrict__ kv, const int* meta,
                                           float (&part)[2]) {
  const int off = meta[blockIdx.x / (gridDim.x / kHeads)];  // the metadata round trip (0)
  const uint4* src = kv + off + static_cast<std::size_t>(blockIdx.x) * N * kThreads;
  uint4 v[N];
#pragma unroll
  for (int i = 0; i < N; ++i) v[i] = __ldg(src + i * kThreads + threadIdx.x);
  unsigned x = 0;
#pragma unroll
  for (int i = 0; i < N; ++i) x ^= v[i].x ^ v[i].y ^ v[i].z ^ v[i].w;
  part[0] = static_cast<float>(x & 0xffff) * 1e-6f;
  part[1] = static_cast<float>(x >> 16) * 1e-6f;
}

template <int N, int kMode>
__global__ void __launch_bounds__(kThreads) probe_kernel(const uint4* __restrict__ kv,
                                                         const int* meta, float* work,
                                                         float* out, int* smid,
                                                         float never) {
  extern __shared__ __align__(16) float rx[];  // cluster push: [rank][kPartial / csize]
  __shared__ __align__(8) unsigned long long s_bar;
  __shared__ int s_last;
  const int tid = threadIdx.x;
  const int splits = gridDim.x / kHeads;
  const int head = blockIdx.x / splits, split = blockIdx.x % splits;
  if (tid == 0) {
    unsigned id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    smid[blockIdx.x] = static_cast<int>(id);
  }
  if constexpr (kMode == kEmpty) return;
  if constexpr (kMode == kClusterPush) {
    const unsigned bar = pagedattn::cuda::smem_addr(&s_bar);
    if (tid == 0) {
      dc::mbar_init(bar, 1);
      dc::mbar_arrive_expect_tx(bar, kPartial * 4);
      dc::fence_mbar_init_cluster();
    }
    dc::cluster_arrive_relaxed();
    float part[2];
    load_share<N>(kv, meta, part);
    dc::cluster_wait();
    // Element e of the partial goes to rank e / per; each thread sends its two floats.
    const int per = kPartial / splits;
    const int e = 2 * tid;
    const unsigned dest = static_cast<unsigned>(e / per);
    const unsigned at = pagedattn::cuda::smem_addr(rx + split * per + e % per);
    dc::st_async_v2(dc::map_rank(at, dest), part[0], part[1], dc::map_rank(bar, dest));
    dc::mbar_wait_cluster(bar, 0);
    for (int i = tid; i < per; i += kThreads) {
      float s = 0;
      for (int r = 0; r < splits; ++r) s += rx[r * per + i];
      out[head * kPartial + split * per + i] = s;
    }
  } else {
    float part[2];
    load_share<N>(kv, meta, part);
    if constexpr (kMode == kLoadsOnly) {
      if (part[0] == never) out[blockIdx.x] = part[1];  // a run-time value: the loads stay
      return;
    }
    float* my = work + static_cast<std::size_t>(blockIdx.x) * kPartial;
    my[2 * tid] = part[0];
    my[2 * tid + 1] = part[1];
    if constexpr (kMode == kCooperative) {
      cooperative_groups::this_grid().sync();
      // CTA b combines elements [b * per, (b + 1) * per) of the 8 heads' 4096 outputs.
      const int per = kHeads * kPartial / gridDim.x;
      for (int i = tid; i < per; i += kThreads) {
        const int g = blockIdx.x * per + i, h = g / kPartial, e = g % kPartial;
        float s = 0;
        for (int r = 0; r < splits; ++r)
          s += __ldcg(work + static_cast<std::size_t>(h * splits + r) * kPartial + e);
        out[g] = s;
      }
    } else {
      __threadfence();
      __syncthreads();
      if (tid == 0) {
        const unsigned prev = atomicAdd(&g_counter[head], 1u);
        s_last = prev == static_cast<unsigned>(splits - 1);
        if (s_last) g_counter[head] = 0;
      }
      __syncthreads();
      if (!s_last) return;
      __threadfence();
      for (int e = tid; e < kPartial; e += kThreads) {
        float s = 0;
        for (int r = 0; r < splits; ++r)
          s += __ldcg(work + static_cast<std::size_t>(head * splits + r) * kPartial + e);
        out[head * kPartial + e] = s;
      }
    }
  }
}

struct Variant {
  const char* name;
  int ctas;
  int mode;
  int cluster;  // CTAs per cluster (0: none)
};

}  // namespace

int main() {
  using namespace pagedattn::cuda::bench;
  const std::size_t n16 = kBytes / 16;
  uint4* kv = nullptr;
  int* meta = nullptr;
  float* work = nullptr;
  float* out = nullptr;
  int* smid = nullptr;
  CK(cudaMalloc(&kv, kBytes));
  CK(cudaMalloc(&meta, kHeads * sizeof(int)));
  CK(cudaMalloc(&work, 128 * kPartial * sizeof(float)));
  CK(cudaMalloc(&out, kHeads * kPartial * sizeof(float)));
  CK(cudaMalloc(&smid, 128 * sizeof(int)));
  CK(cudaMemset(meta, 0, kHeads * sizeof(int)));
  {
    auto st = fill_uniform(kv, pagedattn::DType::kFloat32, n16 * 4, 7, -1.f, 1.f);
    if (!st.ok()) return 1;
  }
  const Variant variants[] = {
      {"empty, 64 / 8", 64, kEmpty, 8},
      {"empty, 128 / 16", 128, kEmpty, 16},
      {"loads only, 64", 64, kLoadsOnly, 0},
      {"loads only, 128", 128, kLoadsOnly, 0},
      {"cluster push, 64 / 8", 64, kClusterPush, 8},
      {"cluster push, 128 / 16", 128, kClusterPush, 16},
      {"cooperative, 128", 128, kCooperative, 0},
      {"counter, 128", 128, kCounter, 0},
      {"cooperative, 64", 64, kCooperative, 0},
      {"counter, 64", 64, kCounter, 0},
  };
  std::printf("median us of 200 calls after the clean flush; graph = one graph replay per call\n");
  std::printf("%-24s %7s %7s %9s\n", "variant", "plain", "graph", "SMs used");
  for (const Variant& v : variants) {
    auto launch = [&](cudaStream_t st) -> cudaError_t {
      void* kernel = nullptr;
      const bool big = v.ctas == 64;
#define PROBE_PICK(M) \
  kernel = big ? reinterpret_cast<void*>(probe_kernel<16, M>) : reinterpret_cast<void*>(probe_kernel<8, M>)
      switch (v.mode) {
        case kLoadsOnly: PROBE_PICK(kLoadsOnly); break;
        case kClusterPush: PROBE_PICK(kClusterPush); break;
        case kCooperative: PROBE_PICK(kCooperative); break;
        case kEmpty: PROBE_PICK(kEmpty); break;
        default: PROBE_PICK(kCounter); break;
      }
#undef PROBE_PICK
      const std::size_t smem = v.mode == kClusterPush ? kPartial * sizeof(float) : 0;
      cudaLaunchAttribute attr[1];
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(v.ctas);
      cfg.blockDim = dim3(kThreads);
      cfg.dynamicSmemBytes = smem;
      cfg.stream = st;
      if (v.cluster > 0) {
        CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = static_cast<unsigned>(v.cluster);
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
      } else if (v.mode == kCooperative) {
        attr[0].id = cudaLaunchAttributeCooperative;
        attr[0].val.cooperative = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
      }
      const uint4* a0 = kv;
      const int* a1 = meta;
      float never = -1.f;
      void* args[] = {&a0, &a1, &work, &out, &smid, &never};
      return cudaLaunchKernelExC(&cfg, kernel, args);
    };
    CK(launch(nullptr));
    CK(cudaDeviceSynchronize());
    std::vector<int> ids(v.ctas);
    CK(cudaMemcpy(ids.data(), smid, v.ctas * sizeof(int), cudaMemcpyDeviceToHost));
    const std::set<int> distinct(ids.begin(), ids.end());
    Call call = [&](void* s) -> pagedattn::Status {
      CK(launch(static_cast<cudaStream_t>(s)));
      return pagedattn::Status::Ok();
    };
    double r[2];
    for (int graph = 0; graph < 2; ++graph) {
      auto t = time_call(0, call, TimingOptions{10, 200, L2Flush::kClean}, graph == 1);
      if (!t.ok()) {
        std::printf("%s: error: %s\n", v.name, t.status().message().c_str());
        return 1;
      }
      r[graph] = pagedattn::bench::median_of(*t);
    }
    std::printf("%-24s %7.2f %7.2f %9zu\n", v.name, r[0], r[1], distinct.size());
  }
  cudaFree(kv);
  cudaFree(meta);
  cudaFree(work);
  cudaFree(out);
  cudaFree(smid);
  return 0;
}
