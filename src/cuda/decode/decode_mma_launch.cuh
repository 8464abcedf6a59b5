// The decode fast path's merge kernel and launchers (decode_mma_kernel.cuh has the split
// kernel): shared by decode_mma.cu (16-bit caches, decode_mma_run) and decode_mma_fp8.cu (fp8
// caches), which compile in parallel.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>
#include <utility>

#include "pagedattn/kv_cache.h"
#include "pagedattn/status.h"
#include "src/cuda/decode/decode_common.cuh"
#include "src/cuda/decode/decode_mma.h"
#include "src/cuda/decode/decode_mma_kernel.cuh"

namespace pagedattn::cuda {

namespace decode {

/// Launch geometry of one call.
struct DecodeGrid {
  int num_splits, num_kv_heads, num_seqs;
  int list_ctas;   // > 0: work-list mode with this many CTAs per KV head
  int smem_limit;  // the kernel's dynamic shared-memory attribute (DecodeMmaConfig)
  bool dependent_launch;  // the merge kernel by programmatic dependent launch
  // Batch-invariant plans: the merge kernel's split groups are fixed (the most a CTA holds),
  // so the order in which a sequence's splits are folded does not follow the batch.
  bool invariant;
  // fp8: the previous instances (DecodeMmaConfig::fp8_untuned).
  bool fp8_untuned;
};

/// Launch the fp8-cache kernels (decode_mma_fp8.cu) for head `head` (64, 128, 256 or 512), cache
/// dtype `kv` (e4m3 or e5m2) and `layout`, then the merge kernel when the call has splits.
/// Errors: kInternal when a launch fails.
Status launch_fp8_call(const DecodeParams& p, int head, DType kv, KVLayout layout,
                       const DecodeGrid& gr, cudaStream_t stream);
/// instance_ctas_per_sm of the fp8 instance launch_fp8_call picks (decode_mma_fp8.cu) for the
/// instance head `head` (64, 128, 256, 512) running head `head_size` (below it: the masked
/// instance); 0 for a head without one.
int fp8_ctas_per_sm(int head, int head_size, int gqa, DType kv, KVLayout layout);
/// launch_fp8_call and fp8_ctas_per_sm for head 512 (GQA <= 8), in decode_mma_fp8_h512.cu: its
/// eight instances are the largest of the fp8 kernels and compile in parallel with the others.
Status launch_fp8_h512_call(const DecodeParams& p, DType kv, KVLayout layout,
                            const DecodeGrid& gr, cudaStream_t stream);
int fp8_h512_ctas_per_sm(DType kv, KVLayout layout);

/// Launch the 16-bit-cache kernels of head HEAD (80, 96, 112, 192 or 512; explicitly instantiated
/// in decode_mma_h<HEAD>.cu, one TU per head so that they compile in parallel) for a
/// `bf16` (else fp16) query and cache and `layout`, then the merge kernel when the call has
/// splits. Errors: kInternal when a launch fails.
template <int HEAD>
Status launch_head_call(const DecodeParams& p, bool bf16, KVLayout layout, const DecodeGrid& gr,
                        cudaStream_t stream);

}  // namespace decode

namespace {

/// Most threads of the merge kernel's CTA (HEAD / 4 per split group, at most as many groups
/// as the call has splits: a batch of two-split sequences launches thousands of these CTAs).
constexpr int kMergeThreads = 256;

/// Combine the splits of each (decode sequence, query head): a fixed-order log-sum-exp merge
/// (deterministic), adding the sink once. The merge runs after the split kernel, so its own
/// time is added to the call: it is latency-bound, and its cost is the number of dependent
/// memory round trips. Here a thread owns 4 head dims (one 16-byte load per split) and one of
/// G split groups, loads the LSEs and partial outputs of up to 8 of its splits in one batch
/// (one round trip for up to 8 G splits: 64 for head 128), folds them into a running
/// (max, sum, accumulator), and the G groups combine through shared memory. The sequence's
/// metadata loads go out together first: two round trips in all, where one thread per head dim
/// looping over the splits took one round trip per 8 splits. Launched with HEAD / 4 threads per
/// split group, min(splits, kMergeThreads / (HEAD / 4)) groups (HEAD: the output dims per query
/// head, a masked instance's own head).
/// `early_exit` (decode_merge_early_exit): the CTAs of sequences with nothing to merge (one
/// split, or not a decode row) return at once instead of waiting for the split kernel; CTA
/// (0, 0) always waits, which is enough to keep the merge grid from completing before the
/// split grid. In a skewed batch (255 short sequences, one long: 8192 merge CTAs of which 32
/// merge) the waiting CTAs held the SMs' CTA slots after the split kernel ended and were
/// launched and retired wave after wave on the critical path; returning early, they run
/// while the split kernel's last CTAs do.
template <class T, int HEAD>
__global__ void __launch_bounds__(kMergeThreads)
    decode_merge_kernel(const DecodeParams p, int early_exit) {
  constexpr int V = HEAD / 4;                // threads per output row
  constexpr int GMAX = kMergeThreads / V;    // split groups at most
  constexpr int U = 8;                       // splits per thread per batch
  const int G = static_cast<int>(blockDim.x) / V;
  __shared__ float s_m[GMAX], s_l[GMAX];
  __shared__ __align__(16) float s_acc[GMAX][HEAD];
  const int h = blockIdx.x, s = blockIdx.y;
  const int g = threadIdx.x / V, c = threadIdx.x % V;
  const int q0 = p.qsl[s * p.qsl_stride];
  const int q1 = p.qsl[(s + 1) * p.qsl_stride];
  const int len = p.seq_lens[s * p.sl_stride];
  // CTA (0, 0) waits even when it has nothing to merge (without early_exit, every CTA does):
  // a grid launched as a programmatic dependent may otherwise complete before its
  // prerequisite, and the stream's next operation would then start while the split kernel
  // still writes outputs.
  const int nsplit = decode_num_splits(len, p.window, p.chunk, p.max_splits);
  // Nothing to merge: one split (the split kernel wrote the output itself) or not a decode row.
  const bool idle = q1 - q0 != 1 || nsplit <= 1;
  if (idle && early_exit && (blockIdx.x | blockIdx.y) != 0) return;
  griddep_wait();
  if (idle) return;
  const std::int64_t base = static_cast<std::int64_t>(s) * p.max_splits * p.num_heads + h;
  float m = -INFINITY, l = 0.f, acc[4] = {0.f, 0.f, 0.f, 0.f};
  for (int i0 = g; i0 < nsplit; i0 += G * U) {
    float lse[U];
    float4 o[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = i0 + u * G;
      const std::int64_t row = base + static_cast<std::int64_t>(i) * p.num_heads;
      lse[u] = i < nsplit ? p.part_lse[row] : -INFINITY;
      o[u] = i < nsplit ? *reinterpret_cast<const float4*>(p.part_o + row * HEAD + 4 * c)
                        : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    float mb = m;
#pragma unroll
    for (int u = 0; u < U; ++u) mb = fmaxf(mb, lse[u]);
    bool any = false;  // a split with keys, or with NaN scores (NaN != -inf)
#pragma unroll
    for (int u = 0; u < U; ++u) any |= lse[u] != -INFINITY;
    if (!any) continue;  // only empty splits in this batch: nothing to add
    // While mb is -inf the state holds only 0s (empty splits) or NaNs (splits whose scores
    // were all NaN), which the NaN weights below keep.
    const float mb_base = softmax_base(mb);
    const float r = __expf(m - mb_base);  // 0 while m is -inf
    l *= r;
#pragma unroll
    for (int k = 0; k < 4; ++k) acc[k] *= r;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const float w = __expf(lse[u] - mb_base);  // 0 for an empty split (-inf)
      l += w;
      acc[0] += w * o[u].x;
      acc[1] += w * o[u].y;
      acc[2] += w * o[u].z;
      acc[3] += w * o[u].w;
    }
    m = mb;
  }
  if (c == 0) {
    s_m[g] = m;
    s_l[g] = l;
  }
#pragma unroll
  for (int k = 0; k < 4; ++k) s_acc[g][4 * c + k] = acc[k];
  __syncthreads();
  if (g != 0) return;
  float M = -INFINITY;
  for (int j = 0; j < G; ++j) M = fmaxf(M, s_m[j]);
  float sk = -INFINITY;
  if (p.sinks != nullptr) {
    sk = p.sinks[static_cast<std::int64_t>(h) * p.sinks_stride];
    M = fmaxf(M, sk);
  }
  const float m_base = softmax_base(M);
  float den = __expf(sk - m_base);
  float out[4] = {0.f, 0.f, 0.f, 0.f};
  for (int j = 0; j < G; ++j) {
    // A group that saw only empty splits (m -inf) weighs 0; its l and acc are 0, or NaN.
    const float w = __expf(s_m[j] - m_base);
    den += w * s_l[j];
#pragma unroll
    for (int k = 0; k < 4; ++k) out[k] += w * s_acc[j][4 * c + k];
  }
  // den = 0: every key's logit is -inf and no sink, 0/0 (NaN) as in the oracle.
  const float lse_total = den != 0.f ? m_base + __logf(den) : NAN;
#pragma unroll
  for (int k = 0; k < 4; ++k) store_output<T>(p, q0, h, 4 * c + k, out[k] / den, lse_total);
}

template <class T, int HEAD, bool SPLIT, int NT, bool PAIR = false, int KV = kKvSame,
          class TO = T, int STAGES = decode_mma_stages(HEAD, KV == kKvSame ? 2 : 1, 8 * NT),
          int RH = 0>
Status launch(const DecodeParams& p, const DecodeGrid& gr, cudaStream_t stream) {
  // Output dims per query head: the pairs' 64, a masked head's own (RH, decode_mma_maskable).
  constexpr int ho = RH ? RH : PAIR ? HEAD / 2 : HEAD;
  auto kernel = decode_mma_kernel<T, HEAD, SPLIT, NT, STAGES, PAIR, KV, RH>;
  const int smem = static_cast<int>(
      decode_mma_smem_bytes_for(HEAD, KV == kKvSame ? 2 : 1, STAGES) +
      (p.cluster ? decode_cluster_rx_bytes(ho, p.gqa, gr.num_splits) : 0));
  // The attribute is per function and per device; setting it is not a stream operation, so
  // it is legal during graph capture, and cheap enough to repeat. It is the same for every
  // call on a device (DecodeMmaConfig::smem_limit), so that a graph captured with a cluster
  // launch still runs after calls without one.
  PA_CUDA_RETURN(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, gr.smem_limit),
      "decode_mma: cudaFuncSetAttribute");
  const dim3 grid = gr.list_ctas > 0 ? dim3(gr.num_kv_heads, gr.list_ctas, 1)
                                     : dim3(gr.num_splits, gr.num_kv_heads, gr.num_seqs);
  if (p.cluster) {  // the splits of each (sequence, KV head) form one cluster
    PA_CUDA_RETURN(launch_in_x_clusters(kernel, grid, 32 * decode_mma_warps(HEAD), static_cast<std::size_t>(smem),
                                        static_cast<unsigned>(gr.num_splits), stream, p),
                   "decode_mma: cluster launch");
    return Status::Ok();
  }
  kernel<<<grid, 32 * decode_mma_warps(HEAD), smem, stream>>>(p);
  PA_CUDA_RETURN(cudaGetLastError(), "decode_mma: kernel launch");
  if (gr.num_splits > 1) {
    const int groups =
        gr.invariant ? kMergeThreads / (ho / 4) : std::min(gr.num_splits, kMergeThreads / (ho / 4));
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(p.num_heads, gr.num_seqs);
    cfg.blockDim = dim3(groups * (ho / 4));
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    // Also inside a stream capture: the graph then holds a programmatic edge from the split
    // kernel to the merge kernel (CudaGraph.DecodeMergeKernelCaptureAndReplayEqualEager).
    cfg.numAttrs = gr.dependent_launch ? 1 : 0;
    const int early = decode_merge_early_exit() ? 1 : 0;
    cudaError_t err = cudaLaunchKernelEx(&cfg, decode_merge_kernel<TO, ho>, p, early);
    if (err != cudaSuccess && cfg.numAttrs == 1 &&
        (err == cudaErrorNotSupported || err == cudaErrorInvalidValue)) {
      // A driver that refuses the attribute: the plain launch is correct too (the kernel's
      // griddepcontrol.wait is then a no-op).
      (void)cudaGetLastError();
      cfg.numAttrs = 0;
      err = cudaLaunchKernelEx(&cfg, decode_merge_kernel<TO, ho>, p, early);
    }
    PA_CUDA_RETURN(err, "decode_mma: merge launch");
  }
  return Status::Ok();
}

/// f(std::integral_constant<int, RH>{}) for the head `head_size` among RH, RH + 16, ... below
/// HEAD (the heads of a masked instance, decode_mma_instance_head); `none` for another head.
template <int RH, int HEAD, class R, class F>
R with_masked_head(int head_size, R none, F&& f) {
  if constexpr (RH >= HEAD) {
    (void)head_size;
    (void)f;
    return none;
  } else {
    if (head_size == RH) return f(std::integral_constant<int, RH>{});
    return with_masked_head<RH + 16, HEAD, R>(head_size, std::move(none), f);
  }
}

/// The 16-bit instances of head HEAD for `layout` and the GQA group; a head below HEAD
/// (decode_mma_instance_head) on its masked instance RH.
template <class T, int HEAD, int RH = 0>
Status launch_layout(const DecodeParams& p, KVLayout layout, const DecodeGrid& gr,
                     cudaStream_t stream) {
  if constexpr (RH == 0 && decode_mma_maskable(HEAD, false)) {
    if (p.head_size < HEAD)
      return with_masked_head<decode_mma_masked_low(HEAD, false), HEAD>(
          p.head_size, Status(StatusCode::kInternal, "decode_mma: no masked instance"),
          [&](auto rh) { return launch_layout<T, HEAD, decltype(rh)::value>(p, layout, gr, stream); });
  }
  constexpr int ST = decode_mma_stages(HEAD, 2);
  if constexpr (HEAD > 128) {  // heads 192, 256: GQA <= 8 only (decode_mma_rows_supported)
    if (layout == KVLayout::kSplit)
      return launch<T, HEAD, true, 1, false, kKvSame, T, ST, RH>(p, gr, stream);
    return launch<T, HEAD, false, 1, false, kKvSame, T, ST, RH>(p, gr, stream);
  } else {
    const bool wide = p.gqa > 8;
    if (layout == KVLayout::kSplit)
      return wide ? launch<T, HEAD, true, 2>(p, gr, stream) : launch<T, HEAD, true, 1>(p, gr, stream);
    return wide ? launch<T, HEAD, false, 2>(p, gr, stream) : launch<T, HEAD, false, 1>(p, gr, stream);
  }
}

/// fp8 caches: the fp16-MMA kernel whatever the query dtype (p.q_bf16), the merge kernel of the
/// output dtype; the stages of decode_mma_stages (8 columns: the untuned ones where the plan
/// chose them, DecodeMmaConfig::fp8_untuned, which it never does for a masked head); a head
/// below HEAD (decode_mma_instance_head) on its masked instance.
template <int HEAD, int KV, class TO, int RH = 0>
Status launch_fp8_layout(const DecodeParams& p, KVLayout layout, const DecodeGrid& gr,
                         cudaStream_t stream) {
  if constexpr (RH == 0 && decode_mma_maskable(HEAD, true)) {
    if (p.head_size < HEAD)
      return with_masked_head<decode_mma_masked_low(HEAD, true), HEAD>(
          p.head_size, Status(StatusCode::kInternal, "decode_mma: no masked fp8 instance"),
          [&](auto rh) {
            return launch_fp8_layout<HEAD, KV, TO, decltype(rh)::value>(p, layout, gr, stream);
          });
  }
  constexpr int S1 = decode_mma_stages(HEAD, 1, 8), S2 = decode_mma_stages(HEAD, 1, 16);
  if constexpr (HEAD >= 256) {  // GQA <= 8 only
    if (layout == KVLayout::kSplit)
      return launch<__half, HEAD, true, 1, false, KV, TO, S1, RH>(p, gr, stream);
    return launch<__half, HEAD, false, 1, false, KV, TO, S1, RH>(p, gr, stream);
  } else {
    const bool wide = p.gqa > 8;
    const bool split = layout == KVLayout::kSplit;
    if (wide)
      return split ? launch<__half, HEAD, true, 2, false, KV, TO, S2, RH>(p, gr, stream)
                   : launch<__half, HEAD, false, 2, false, KV, TO, S2, RH>(p, gr, stream);
    if constexpr (RH != 0) {
      return split ? launch<__half, HEAD, true, 1, false, KV, TO, S1, RH>(p, gr, stream)
                   : launch<__half, HEAD, false, 1, false, KV, TO, S1, RH>(p, gr, stream);
    } else {
      constexpr int kOld = decode_mma_stages(HEAD, 1, 8, false);
      if (gr.fp8_untuned)
        return split ? launch<__half, HEAD, true, 1, false, KV, TO, kOld>(p, gr, stream)
                     : launch<__half, HEAD, false, 1, false, KV, TO, kOld>(p, gr, stream);
      return split ? launch<__half, HEAD, true, 1, false, KV, TO>(p, gr, stream)
                   : launch<__half, HEAD, false, 1, false, KV, TO>(p, gr, stream);
    }
  }
}

/// CTAs per SM the current device runs of one split-kernel instance (unpaired, no cluster
/// receive buffer), from the occupancy calculator: what decode_mma_slots must count per SM
/// (decode_mma_device_ctas_per_sm). 0 when a query fails. Sets the kernel's shared-memory
/// attribute, which every launch sets again to its plan's limit.
template <class T, int HEAD, bool SPLIT, int NT, int KV = kKvSame,
          int STAGES = decode_mma_stages(HEAD, KV == kKvSame ? 2 : 1, 8 * NT), int RH = 0>
int instance_ctas_per_sm() {
  auto kernel = decode_mma_kernel<T, HEAD, SPLIT, NT, STAGES, false, KV, RH>;
  const int smem =
      static_cast<int>(decode_mma_smem_bytes_for(HEAD, KV == kKvSame ? 2 : 1, STAGES));
  int n = 0;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) !=
          cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kDecodeThreads, smem) !=
          cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

template <int HEAD>
Status launch_fp8(const DecodeParams& p, DType kv, KVLayout layout, const DecodeGrid& gr,
                  cudaStream_t stream) {
  if (kv == DType::kFloat8E4M3)
    return p.q_bf16 ? launch_fp8_layout<HEAD, kKvE4M3, __nv_bfloat16>(p, layout, gr, stream)
                    : launch_fp8_layout<HEAD, kKvE4M3, __half>(p, layout, gr, stream);
  return p.q_bf16 ? launch_fp8_layout<HEAD, kKvE5M2, __nv_bfloat16>(p, layout, gr, stream)
                  : launch_fp8_layout<HEAD, kKvE5M2, __half>(p, layout, gr, stream);
}

}  // namespace

}  // namespace pagedattn::cuda
