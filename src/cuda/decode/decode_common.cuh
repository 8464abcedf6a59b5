// Pieces the two decode kernels share (decode_mma.cu: the pipelined kernel; decode_small.cu:
// the one-tile-per-warp kernel of latency-bound calls): the kernel parameters, the split cut,
// the score transform and online-softmax step, the output store and the thread-block-cluster
// primitives (sm_90, PTX ISA 8.0+).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "src/cuda/common/cuda_common.cuh"
#include "src/cuda/common/fast_div.h"
#include "src/cuda/common/mbarrier.cuh"
#include "src/cuda/common/mma_common.cuh"
#include "src/cuda/decode/decode_split.h"

namespace pagedattn::cuda::decode {

/// Arguments of the decode kernels, filled by decode_mma_run from validated AttentionArgs and
/// the plan's DecodeMmaConfig: pointers, element strides (or byte strides where noted) and the
/// split cut.
struct DecodeParams {
  const void* q;
  std::int64_t q_tok, q_head;
  void* out;
  std::int64_t o_tok, o_head;
  float* lse;
  std::int64_t l_tok, l_head;
  const void* k;
  const void* v;
  std::int64_t k_head, v_head;  // element strides of one KV head
  // Byte strides the kernel multiplies in 32 x 32 -> 64 bits (decode_mma_aligned_strides
  // guarantees that the element strides fit in 31 bits). Key (block b, token t, 16-byte chunk
  // c) at b*k_blk + t*k_tok + c*k_chunk; value nhd/hnd: b*v_blk + t*v_tok + c*16;
  // value split: b*v_blk + d*v_dim + 2t.
  unsigned k_blk, k_tok, k_chunk, v_blk, v_tok, v_dim;
  const int* block_table;
  std::int64_t bt_seq;
  int bt_blk;
  int bt_width;  // entries per block-table row (the small kernel's speculative id loads)
  const int* seq_lens;
  std::int64_t sl_stride;
  const int* qsl;
  std::int64_t qsl_stride;
  int num_heads, gqa, block_size;
  // Output dims per query head: the head size (64 for the head-64 pairs). The launchers pick
  // a masked instance by it when it is below the instance's HEAD (decode_mma_maskable).
  int head_size;
  // A tile advances every token by 64 = step_q blocks + step_r tokens.
  int step_q, step_r;
  FastDiv bs_div;
  float scale, scale_log2, softcap;
  int window;
  const float* alibi;
  std::int64_t alibi_stride;
  const float* sinks;
  std::int64_t sinks_stride;
  int chunk, max_splits;
  int num_seqs;
  int work_list;  // 1: CTAs stride over a numbered list of (sequence, split) items
  int cluster;    // 1: the splits of one (sequence, KV head) form a cluster and merge in DSMEM
  // Cluster mode: output elements (of gqa * HEAD) that each CTA of the cluster combines
  // (decode_cluster_share), and a divider by it.
  int cl_share;
  FastDiv cl_div;
  float* part_o;
  float* part_lse;
  // fp8 caches: the dequantisation scales (fill_cache_scales; cache_scale picks the device
  // value of a KV head or the host scalar).
  const float* k_scales;
  const float* v_scales;
  int scales_stride;
  float k_scale, v_scale;
  int q_bf16;  // fp8 kernels (fp16 MMAs): 1 when the query and output are bf16
};

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// (ex2, the flush-to-zero 2^x of the softmax: cuda_common.cuh.)

/// Split `split` of a decode sequence with `len` keys (decode_split.h).
__device__ __forceinline__ bool split_range(const DecodeParams& p, int len, int split,
                                            int* start, int* valid_lo, int* end, int* nsplit) {
  return decode_split_range(len, p.window, p.chunk, p.max_splits, split, start, valid_lo, end,
                            nsplit);
}

/// Splits of sequence `s` (0 when it is not a decode row or has no keys).
__device__ __forceinline__ int seq_splits(const DecodeParams& p, int s) {
  const int q0 = p.qsl[s * p.qsl_stride];
  if (p.qsl[(s + 1) * p.qsl_stride] - q0 != 1) return 0;
  return decode_num_splits(p.seq_lens[s * p.sl_stride], p.window, p.chunk, p.max_splits);
}

/// A raw score q.k in log2 units: times the softmax scale, then (when `mods`) soft-capped
/// (softcap * tanh(z / softcap), Gemma 2) and ALiBi-biased by slope * (key position - query
/// position) (`dist`), as the oracle does (DESIGN.md, the exact math); the scale is folded
/// with log2(e) when there are no mods, so that the softmax takes one MUFU.EX2 per score.
__device__ __forceinline__ float score_log2(const DecodeParams& p, float z, bool mods, float slope,
                                            int dist) {
  if (mods) {
    z *= p.scale;
    if (p.softcap > 0.f) z = p.softcap * tanhf(z / p.softcap);
    if (p.alibi != nullptr) z += slope * static_cast<float>(dist);
    return z * kLog2e;
  }
  return z * p.scale_log2;
}

/// score_log2 for the fp8 kernels: `mul` replaces the softmax scale (times log2(e) without
/// mods), so that it can carry k_scale and the query's power-of-two scale too.
__device__ __forceinline__ float score_log2_mul(const DecodeParams& p, float z, bool mods,
                                                float mul, float slope, int dist) {
  if (mods) {
    z *= mul;
    if (p.softcap > 0.f) z = p.softcap * tanhf(z / p.softcap);
    if (p.alibi != nullptr) z += slope * static_cast<float>(dist);
    return z * kLog2e;
  }
  return z * mul;
}

/// Four fp8 codes (bytes b0..b3 of `x`, cache kind KV) as two fp16 pairs, exactly: `lo` = (b0,
/// b1), `hi` = (b2, b3), first element in the low half. e5m2 is the top byte of an fp16.
template <int KV>
__device__ __forceinline__ void fp8_pairs_to_h2(unsigned x, unsigned* lo, unsigned* hi) {
  if constexpr (KV == kKvE5M2) {
    *lo = __byte_perm(x, 0u, 0x1404);
    *hi = __byte_perm(x, 0u, 0x3424);
  } else {
    asm("{\n.reg .b16 l, h;\nmov.b32 {l, h}, %2;\ncvt.rn.f16x2.e4m3x2 %0, l;\n"
        "cvt.rn.f16x2.e4m3x2 %1, h;\n}\n"
        : "=r"(*lo), "=r"(*hi)
        : "r"(x));
  }
}

/// The same for the register of a transposed ldmatrix of fp8 bytes (b0, b1: dims 2j, 2j + 1
/// of one token; b2, b3: those of the next token): `lo` = (b0, b2), `hi` = (b1, b3), i.e. one
/// dim of two consecutive tokens each.
template <int KV>
__device__ __forceinline__ void fp8_trans_to_h2(unsigned x, unsigned* lo, unsigned* hi) {
  if constexpr (KV == kKvE5M2) {
    *lo = __byte_perm(x, 0u, 0x2404);
    *hi = __byte_perm(x, 0u, 0x3414);
  } else {
    fp8_pairs_to_h2<KV>(__byte_perm(x, 0u, 0x3120), lo, hi);
  }
}

/// Sum of `v` over the 8 lanes of an S^T fragment that hold the same query-head column (lanes
/// equal in lane % 4): a column's running sum is spread over its token rows.
__device__ __forceinline__ float sum_over_token_lanes(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 4);
  v += __shfl_xor_sync(0xffffffffu, v, 8);
  v += __shfl_xor_sync(0xffffffffu, v, 16);
  return v;
}

/// The online softmax's start: running maxima -inf, sums 0, output accumulators (O^T
/// fragments: DT 16-dim row tiles x NT 8-head column tiles, 4 floats per lane) 0.
template <int NT, int DT>
__device__ __forceinline__ void online_softmax_init(float (&m_run)[NT][2], float (&l_run)[NT][2],
                                                    float (&o)[DT][NT][4]) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    m_run[nt][0] = m_run[nt][1] = -INFINITY;
    l_run[nt][0] = l_run[nt][1] = 0.f;
#pragma unroll
    for (int i = 0; i < DT; ++i) o[i][nt][0] = o[i][nt][1] = o[i][nt][2] = o[i][nt][3] = 0.f;
  }
}

/// Multiply the output accumulators by the correction factors of online_softmax_step (lane
/// element e of a fragment is head column 2 (lane % 4) + e % 2).
template <int NT, int DT>
__device__ __forceinline__ void rescale_accumulators(float (&o)[DT][NT][4],
                                                     const float (&corr)[NT][2]) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int i = 0; i < DT; ++i) {
      o[i][nt][0] *= corr[nt][0];
      o[i][nt][1] *= corr[nt][1];
      o[i][nt][2] *= corr[nt][0];
      o[i][nt][3] *= corr[nt][1];
    }
}

/// One 16-token step of the online softmax (FlashAttention-2, log2 units) on the S^T fragment
/// of a warp: `sc` holds the step's scores (16 tokens x 8 NT query-head columns; element e of
/// a lane is column 2 (lane % 4) + e % 2, token lane / 4 + 8 (e / 2)), `mx` this lane's
/// per-column maxima of them. Updates the running maxima and sums of the columns, returns in
/// `corr` the factor the output accumulators must be multiplied by (1 where the maximum did
/// not move or every score so far is masked: -inf - -inf would be NaN) and in `pb` the
/// probabilities P^T as the B fragment of the P V MMA (k = tokens, through movmatrix). The
/// probabilities are taken relative to softmax_base, so NaN scores stay NaN.
template <class T, int NT>
__device__ __forceinline__ void online_softmax_step(const float (&mx)[NT][2],
                                                    const float (&sc)[NT][4],
                                                    float (&m_run)[NT][2], float (&l_run)[NT][2],
                                                    float (&corr)[NT][2], unsigned (&pb)[NT][2]) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      float m = mx[nt][b];
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 4));
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 8));
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 16));
      const float m_new = fmaxf(m_run[nt][b], m);
      corr[nt][b] = m_new == -INFINITY ? 1.f : ex2(m_run[nt][b] - m_new);
      m_run[nt][b] = m_new;
    }
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const float base[2] = {softmax_base(m_run[nt][0]), softmax_base(m_run[nt][1])};
    float pv[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) pv[e] = ex2(sc[nt][e] - base[e & 1]);
    l_run[nt][0] = l_run[nt][0] * corr[nt][0] + pv[0] + pv[2];
    l_run[nt][1] = l_run[nt][1] * corr[nt][1] + pv[1] + pv[3];
    // (tokens 0-7 | 8-15) x 8 heads, transposed into the B fragment (k = tokens).
    pb[nt][0] = mma::movmatrix_trans(mma::pack2<T>(pv[0], pv[1]));
    pb[nt][1] = mma::movmatrix_trans(mma::pack2<T>(pv[2], pv[3]));
  }
}

/// Output row of query token q0, head h: element d rounded to T, and the row's LSE (natural
/// log) from the thread of element 0 when the caller asked for it.
template <class T>
__device__ __forceinline__ void store_output(const DecodeParams& p, int q0, int h, int d, float v,
                                             float lse) {
  T* out = static_cast<T*>(p.out) + static_cast<std::int64_t>(q0) * p.o_tok +
           static_cast<std::int64_t>(h) * p.o_head;
  store_rounded(out + d, v);
  if (d == 0 && p.lse != nullptr)
    p.lse[static_cast<std::int64_t>(q0) * p.l_tok + static_cast<std::int64_t>(h) * p.l_head] = lse;
}

// Programmatic dependent launch (sm_90): the split kernel lets the merge kernel that follows it
// in the stream launch once every split CTA has started, and the merge kernel waits for the
// split kernel's completion (and its memory) after its metadata loads, so its launch and
// those loads overlap the splits' last tiles. Both are no-ops when the launch did not ask for
// it.
__device__ __forceinline__ void griddep_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
__device__ __forceinline__ void griddep_wait() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
// Cluster merge primitives (sm_90, PTX ISA 8.0+). The splits of one (sequence, KV head) push
// their partial results into the shared memory of the CTA that combines each output element
// (st.async, which signals the destination's mbarrier with the bytes it wrote), so a CTA waits
// only for its own inputs to land: no cluster-wide barrier between the partials and the merge
// and none at the end (a CTA exits once it has received everything; nobody reads its memory).
// (mbar_init and mbar_arrive_expect_tx: mbarrier.cuh.)
/// Wait for phase `parity` of the barrier; acquire at cluster scope pairs with the release of
/// the remote writers' complete-tx.
__device__ __forceinline__ void mbar_wait_cluster(unsigned bar, unsigned parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
/// Make this thread's mbarrier initialisation visible to the other CTAs of the cluster.
__device__ __forceinline__ void fence_mbar_init_cluster() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
}
/// The address of shared-memory address `local` in CTA `rank` of the cluster.
__device__ __forceinline__ unsigned map_rank(unsigned local, unsigned rank) {
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
}
/// Asynchronous 4-byte store into the shared memory of another CTA of the cluster, counted
/// against that CTA's mbarrier `remote_bar` (both cluster addresses from map_rank).
__device__ __forceinline__ void st_async_f32(unsigned remote, float v, unsigned remote_bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%0], %1, [%2];" ::"r"(
                   remote),
               "f"(v), "r"(remote_bar)
               : "memory");
}
/// st_async_f32 of two (8-byte aligned) and four (16-byte aligned) consecutive floats.
__device__ __forceinline__ void st_async_v2(unsigned remote, float a, float b,
                                            unsigned remote_bar) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];" ::"r"(
          remote),
      "f"(a), "f"(b), "r"(remote_bar)
      : "memory");
}
__device__ __forceinline__ void st_async_v4(unsigned remote, float a, float b, float c, float d,
                                            unsigned remote_bar) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, "
      "[%5];" ::"r"(remote),
      "f"(a), "f"(b), "f"(c), "f"(d), "r"(remote_bar)
      : "memory");
}

/// Launch `kernel(p)` on `grid` x `threads` with `smem_bytes` of dynamic shared memory, in
/// thread-block clusters of `cluster_x` CTAs along x (sm_90; both decode kernels put a
/// (sequence, KV head)'s splits in one cluster). Returns the launch's CUDA error.
template <class Kernel>
inline cudaError_t launch_in_x_clusters(Kernel kernel, dim3 grid, unsigned threads,
                                        std::size_t smem_bytes, unsigned cluster_x,
                                        cudaStream_t stream, const DecodeParams& p) {
  cudaLaunchAttribute attr;
  const cudaLaunchConfig_t cfg =
      x_cluster_config(grid, threads, smem_bytes, cluster_x, stream, &attr);
  return cudaLaunchKernelEx(&cfg, kernel, p);
}

/// Launch the small-call kernel (decode_small.cu) for `p` (p.max_splits splits of 2-8,
/// p.cl_div dividing by it): one cluster of p.max_splits CTAs per (sequence, KV head).
/// head_size 64 or 128, GQA <= 16, nhd/hnd caches, 16-byte aligned tensors
/// (decode_mma_aligned). Errors: kInternal when the launch fails.
Status decode_small_run(const DecodeParams& p, int head, bool bf16, int num_kv_heads,
                        int num_seqs, cudaStream_t stream);

}  // namespace pagedattn::cuda::decode
