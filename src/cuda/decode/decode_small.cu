// The small-call decode kernel (DecodeMmaConfig::small_kernel, decode_mma.h "Small calls"):
// latency-bound one-wave decode calls on nhd/hnd caches.
//
// Why a second kernel: W7 (one 1024-token sequence) is a chain of latencies, not a stream of
// bytes (docs/performance.md, "W7"): the pipelined kernel keeps one warp per scheduler, walks
// ~700 instructions before its first copy (cursors, two tiles of copy addresses) and merges
// in long dependent chains. Here
//  - every warp owns one tile of its split (8 warps per CTA: two per scheduler);
//  - the first round trip fetches the sequence metadata together with the block ids of that
//    tile (without a sliding window a split starts at split * chunk, so the ids do not depend
//    on the length): K, V and Q follow in the second round trip, straight into registers
//    (16-byte loads, keys before values, no shared memory, no copy bookkeeping);
//  - the key chunks a lane loads are the A fragments of S^T = K Q^T as they are, because the
//    head dims of one MMA k-step may be any permutation applied to K and Q alike; the value
//    chunks become A fragments of V^T through movmatrix (8x8 transposes in registers);
//  - the merge has one CTA barrier: the warps' states meet in shared memory, each warp derives
//    every weight into its own copy, each thread sums 4 heads of one output row over the warps
//    and pushes the CTA's normalised partial straight into the shared memory of the cluster CTA
//    that combines that row (st.async with an mbarrier that counts the bytes, as the
//    pipelined kernel's cluster merge); all sums are fixed trees (deterministic, short chains).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "src/cuda/common/cuda_common.cuh"
#include "src/cuda/common/mma_common.cuh"
#include "src/cuda/decode/decode_common.cuh"
#include "src/cuda/decode/decode_mma.h"

namespace pagedattn::cuda::decode {

namespace {

using namespace mma;

__device__ __forceinline__ uint4 ldg16(const void* ptr) {
  return __ldg(static_cast<const uint4*>(ptr));
}
/// Max and sum of N values as a fixed binary tree (deterministic; log2(N) dependent steps
/// instead of N - 1).
template <int N>
__device__ __forceinline__ float tree_max(const float* x) {
  if constexpr (N == 1) {
    return x[0];
  } else {
    return fmaxf(tree_max<N / 2>(x), tree_max<N - N / 2>(x + N / 2));
  }
}
template <int N>
__device__ __forceinline__ float tree_sum(const float* x) {
  if constexpr (N == 1) {
    return x[0];
  } else {
    return tree_sum<N / 2>(x) + tree_sum<N - N / 2>(x + N / 2);
  }
}
/// Word i (0-3, a compile-time constant after unrolling) of a 16-byte load.
__device__ __forceinline__ unsigned word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// Fragment bookkeeping (lane = 4 * g + c; PTX ISA "Matrix fragments for mma.m16n8k16"):
//  - tile rows are tokens t0 + g and t0 + g + 8; the lane loads 16-byte chunks c + 4j of both
//    rows (CH / 4 chunks each) for K and V, and of query head 8 nt + g for Q;
//  - S^T k-step 2j + u: A = (K row g chunk c+4j words 2u, 2u+1; row g+8 likewise), B = the query
//    chunk's words 2u, 2u+1: A's logical column 2c + e (+8) and B's logical row 2c + e (+8) are
//    the same head dim, 8(c + 4j) + 4u + e (+2);
//  - V^T row tile 2j + ih: rows 0-7 are movmatrix(word 2ih of the value chunks c + 4j), rows
//    8-15 movmatrix(word 2ih + 1); its accumulator row r (< 16) is head dim
//    dim_of(unit = 2(2j + ih) + r / 8, r % 8) below.
/// Head dim of row `row` (< 8) of output unit `unit` (8-row half of a 16-dim accumulator tile).
__device__ __forceinline__ int dim_of(int unit, int row) {
  return 32 * (unit >> 2) + 8 * (row >> 1) + 2 * (unit & 3) + (row & 1);
}

/// One CTA = one (split, KV head, sequence), the splits of a sequence one cluster
/// (gridDim.x = cluster size = p.max_splits); kSmallMaxWarps warps, each one tile of
/// chunk / 8 tokens (16, or 8 for 64-token splits) per pass (more passes only when a sequence
/// outgrew its plan). Dynamic shared memory: decode_small_smem_bytes.
template <class T, int HEAD, int NT>
__global__ void __launch_bounds__(kSmallMaxWarps * 32, 1) decode_small_kernel(const DecodeParams p) {
  constexpr int CH = HEAD / 8;   // 16-byte chunks per row
  constexpr int J = CH / 4;      // chunks per lane per row
  constexpr int DT = HEAD / 16;  // 16-dim accumulator tiles
  constexpr int UNITS = 2 * DT;  // 8-dim output units, dealt round-robin to the cluster's CTAs
  constexpr int NH = 8 * NT;     // query-head columns
  extern __shared__ __align__(16) float smem_f[];
  __shared__ __align__(8) unsigned long long s_bar;
  __shared__ __align__(16) float s_m[kSmallMaxWarps][NH];  // per warp, log2 units
  __shared__ __align__(16) float s_l[kSmallMaxWarps][NH];
  __shared__ float s_sink[NH];                              // log2 units (-inf: none)
  // Per warp: the weights of every (warp, head) and the heads' LSEs (see the merge).
  __shared__ __align__(16) float s_wts[kSmallMaxWarps][kSmallMaxWarps * NH + NH];
  static_assert(sizeof(s_bar) + sizeof(s_m) + sizeof(s_l) + sizeof(s_sink) + sizeof(s_wts) ==
                    decode_small_static_smem_bytes(NH),
                "decode_small_static_smem_bytes (the plan's fit test) must match these arrays");

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c = lane & 3;
  constexpr int NW = kSmallMaxWarps;
  const int csize = p.max_splits;
  const int rank = static_cast<int>(blockIdx.x);  // = %cluster_ctarank: cluster (csize, 1, 1)
  const int kvh = static_cast<int>(blockIdx.y), s = static_cast<int>(blockIdx.z);

  // Round trip 1: the metadata, the block ids of this warp's first tile as if the split
  // started at rank * chunk (true without a window; the ids are checked against the split's
  // range before any use, and the clamp keeps the load inside the row), ALiBi slopes.
  const int q0 = p.qsl[s * p.qsl_stride];
  const int q1 = p.qsl[(s + 1) * p.qsl_stride];
  const int len = p.seq_lens[s * p.sl_stride];
  const int* bt = p.block_table + static_cast<std::int64_t>(s) * p.bt_seq;
  // A warp's tile: tpw = chunk / NW tokens (16, or 8 with the upper 8 MMA rows masked).
  const int tpw = p.chunk / NW;
  const int t_spec = rank * p.chunk + warp * tpw;
  int id_spec[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int blk = static_cast<int>(p.bs_div.div(static_cast<unsigned>(t_spec + g + 8 * r)));
    id_spec[r] = g + 8 * r < tpw ? __ldg(bt + max(0, min(blk, p.bt_width - 1)) * p.bt_blk) : 0;
  }
  // The sink of head tid of the group (joins the combine's denominator; log2 units).
  const float sink = (p.sinks != nullptr && tid < p.gqa)
                         ? p.sinks[static_cast<std::int64_t>(kvh * p.gqa + tid) * p.sinks_stride] * kLog2e
                         : -INFINITY;
  float slope[NT][2];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      const int r = nt * 8 + 2 * c + b;
      slope[nt][b] = (p.alibi != nullptr && r < p.gqa)
                         ? p.alibi[static_cast<std::int64_t>(kvh * p.gqa + r) * p.alibi_stride]
                         : 0.f;
    }

  // The barrier expects, from every CTA of the cluster, this CTA's units of its partial output
  // and its LSEs. Remote writes wait for every CTA's set-up (cluster_wait below); the arrive
  // goes out now.
  const unsigned bar = smem_addr(&s_bar);
  if (tid == 0) {
    const int units = (UNITS - rank + csize - 1) / csize;
    const int qd_cnt = (p.gqa + 3) >> 2;
    mbar_init(bar, 1);
    mbar_arrive_expect_tx(bar, static_cast<unsigned>(csize * qd_cnt * 16 * (8 * units + 1)));
    fence_mbar_init_cluster();
  }
  cluster_arrive_relaxed();
  if (q1 - q0 != 1) return;  // not a decode row: every CTA of the cluster leaves

  int start = 0, valid_lo = 0, end = 0, nsplit = 0;
  const bool has_work = split_range(p, len, rank, &start, &valid_lo, &end, &nsplit);

  // Query rows of heads 8 nt + g of the group (rows >= gqa are zero, never written back).
  uint4 qv[NT][J];
  {
    const T* qrow = static_cast<const T*>(p.q) + static_cast<std::int64_t>(q0) * p.q_tok +
                    static_cast<std::int64_t>(kvh * p.gqa) * p.q_head;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int h = nt * 8 + g;
#pragma unroll
      for (int j = 0; j < J; ++j)
        qv[nt][j] = h < p.gqa ? ldg16(qrow + static_cast<std::int64_t>(h) * p.q_head + (c + 4 * j) * 8)
                              : make_uint4(0u, 0u, 0u, 0u);
    }
  }

  float m_run[NT][2], l_run[NT][2];
  float o[DT][NT][4];
  online_softmax_init(m_run, l_run, o);
  const bool mods = p.softcap > 0.f || p.alibi != nullptr;
  const int q_pos = len - 1;
  const char* kbase = static_cast<const char*>(p.k) + static_cast<std::int64_t>(kvh) * p.k_head * 2;
  const char* vbase = static_cast<const char*>(p.v) + static_cast<std::int64_t>(kvh) * p.v_head * 2;

  bool seen = false;    // warp-uniform: a tile has been accumulated
  // Remote writes (below) wait for every CTA's barrier set-up: the wait goes behind the first
  // tile's loads, or after the loop for a warp without tiles (once per thread either way).
  bool waited = false;
  for (int t0 = has_work ? start + warp * tpw : end; t0 < end; t0 += NW * tpw) {
    if (t0 + tpw <= valid_lo) continue;
    // Round trip 2: this tile's K and V rows; tokens outside [valid_lo, end) are zeros (the
    // tail of a block may hold anything, NaN included).
    uint4 kx[J], ky[J], vx[J], vy[J];
    const char* kr[2];
    const char* vr[2];
    bool ok[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int t = t0 + g + 8 * r;
      ok[r] = g + 8 * r < tpw && t >= valid_lo && t < end;
      const int blk = static_cast<int>(p.bs_div.div(static_cast<unsigned>(t)));
      const int off = t - blk * p.block_size;
      int id = 0;
      if (ok[r]) id = t0 == t_spec ? id_spec[r] : __ldg(bt + blk * p.bt_blk);
      kr[r] = kbase + static_cast<std::uint64_t>(static_cast<unsigned>(id)) * p.k_blk +
              static_cast<std::uint64_t>(static_cast<unsigned>(off)) * p.k_tok + c * 16;
      vr[r] = vbase + static_cast<std::uint64_t>(static_cast<unsigned>(id)) * p.v_blk +
              static_cast<std::uint64_t>(static_cast<unsigned>(off)) * p.v_tok + c * 16;
    }
    // Keys first: the scores and the softmax run while the values are still arriving.
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
    for (int j = 0; j < J; ++j) {
      kx[j] = ok[0] ? ldg16(kr[0] + j * 64) : zero;
      ky[j] = ok[1] ? ldg16(kr[1] + j * 64) : zero;
    }
#pragma unroll
    for (int j = 0; j < J; ++j) {
      vx[j] = ok[0] ? ldg16(vr[0] + j * 64) : zero;
      vy[j] = ok[1] ? ldg16(vr[1] + j * 64) : zero;
    }
    if (!waited) {  // hidden behind the loads in flight
      cluster_wait();
      waited = true;
    }

    // S^T (16 tokens x NH heads); two accumulators halve the dependent MMA chain.
    float sc[NT][4], sc2[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) sc[nt][e] = sc2[nt][e] = 0.f;
#pragma unroll
    for (int j = 0; j < J; ++j)
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const unsigned a[4] = {word(kx[j], 2 * u), word(ky[j], 2 * u), word(kx[j], 2 * u + 1),
                               word(ky[j], 2 * u + 1)};
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          if (u) mma16816<T>(sc2[nt], a, word(qv[nt][j], 2 * u), word(qv[nt][j], 2 * u + 1));
          else mma16816<T>(sc[nt], a, word(qv[nt][j], 2 * u), word(qv[nt][j], 2 * u + 1));
        }
      }

    // Element e: token t0 + g + 8(e / 2), head column 8 nt + 2c + e % 2; log2 units.
    const bool edge = tpw < 16 || t0 < valid_lo || t0 + 16 > end;
    float mx[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      mx[nt][0] = mx[nt][1] = -INFINITY;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int b = e & 1;
        const int jt = t0 + g + (e >> 1) * 8;
        float z = score_log2(p, sc[nt][e] + sc2[nt][e], mods, slope[nt][b], jt - q_pos);
        if (edge && (g + (e >> 1) * 8 >= tpw || jt < valid_lo || jt >= end)) z = -INFINITY;
        sc[nt][e] = z;
        mx[nt][b] = fmaxf(mx[nt][b], z);
      }
    }
    float corr[NT][2];
    unsigned pb[NT][2];
    online_softmax_step<T, NT>(mx, sc, m_run, l_run, corr, pb);
    if (seen) rescale_accumulators(o, corr);  // the accumulators are still zero before the first tile
    seen = true;
#pragma unroll
    for (int j = 0; j < J; ++j)
#pragma unroll
      for (int ih = 0; ih < 2; ++ih) {
        const unsigned a[4] = {movmatrix_trans(word(vx[j], 2 * ih)),
                               movmatrix_trans(word(vx[j], 2 * ih + 1)),
                               movmatrix_trans(word(vy[j], 2 * ih)),
                               movmatrix_trans(word(vy[j], 2 * ih + 1))};
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) mma16816<T>(o[2 * j + ih][nt], a, pb[nt][0], pb[nt][1]);
      }
  }
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int b = 0; b < 2; ++b) l_run[nt][b] = sum_over_token_lanes(l_run[nt][b]);

  if (!waited) cluster_wait();

  // The CTA's warps merge first, through shared memory: each warp's raw accumulators, max and
  // sum (log2 units)...
  float* s_o = smem_f;  // [warp][unit][row][NH]
  if (tid < NH) s_sink[tid] = sink;
  if (g == 0) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      *reinterpret_cast<float2*>(&s_m[warp][nt * 8 + 2 * c]) = make_float2(m_run[nt][0], m_run[nt][1]);
      *reinterpret_cast<float2*>(&s_l[warp][nt * 8 + 2 * c]) = make_float2(l_run[nt][0], l_run[nt][1]);
    }
  }
#pragma unroll
  for (int u = 0; u < UNITS; ++u)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
      *reinterpret_cast<float2*>(s_o + ((warp * UNITS + u) * 8 + g) * NH + nt * 8 + 2 * c) =
          make_float2(o[u >> 1][nt][2 * (u & 1)], o[u >> 1][nt][2 * (u & 1) + 1]);
  __syncthreads();

  // ... then each warp computes every (warp w, head h) weight 2^(m_w - M_h) / L_h and each
  // head's LSE into its own copy (one pair per lane and step: no second CTA barrier) ...
  constexpr int PAIRS = NW * NH / 32;  // (w, h) pairs per lane, pair = 32 i + lane = NH w + h
  float* s_wt = s_wts[warp];           // [NW][NH] weights, then [NH] LSEs (log2 units)
  {
    const int h = lane & (NH - 1);
    float mh[NW];
#pragma unroll
    for (int w = 0; w < NW; ++w) mh[w] = s_m[w][h];
    const float M = softmax_base(tree_max<NW>(mh));
    float e[PAIRS], el[PAIRS];
#pragma unroll
    for (int i = 0; i < PAIRS; ++i) {
      const int w = (32 * i + lane) / NH;
      e[i] = ex2(s_m[w][h] - M);  // 0 for a warp without keys; its l is 0 (or NaN)
      el[i] = e[i] * s_l[w][h];
    }
    float L = tree_sum<PAIRS>(el);
#pragma unroll
    for (int o2 = NH; o2 < 32; o2 <<= 1) L += __shfl_xor_sync(0xffffffffu, L, o2);
    // NaN scores make L NaN, which passes through both (L != 0).
    const float inv = L != 0.f ? 1.f / L : 0.f;
#pragma unroll
    for (int i = 0; i < PAIRS; ++i) s_wt[32 * i + lane] = e[i] * inv;
    if (lane < NH) s_wt[NW * NH + h] = L != 0.f ? M + __log2f(L) : -INFINITY;  // -inf: no keys
  }
  __syncwarp();

  // ... and every thread sums 4 heads x 1 row of a unit over the warps (fixed trees:
  // deterministic, short dependent chains) and pushes it to the CTA that combines that unit
  // (units dealt round-robin); the threads of unit 0, row 0 also push the CTA's LSEs to every
  // CTA. Receive buffer (floats, past the warps' accumulators): [unit k][rank][row][NH]
  // outputs, then [rank][NH] LSEs.
  const int u0 = (UNITS + csize - 1) / csize;
  float* rx_o = smem_f + NW * UNITS * 8 * NH;
  float* rx_l = rx_o + u0 * csize * 8 * NH;
  const int qd_cnt = (p.gqa + 3) >> 2;  // head quads with a real head
  constexpr int QB = NT == 1 ? 1 : 2;   // log2(NH / 4)
#pragma unroll
  for (int it0 = 0; it0 < UNITS * 8 * (NH / 4); it0 += NW * 32) {
    const int it = it0 + tid;
    const int qd = it & (NH / 4 - 1), row = (it >> QB) & 7, u = it >> (QB + 3);
    if (it >= UNITS * 8 * (NH / 4) || qd >= qd_cnt) continue;
    float4 wt[NW], v4[NW];
#pragma unroll
    for (int w = 0; w < NW; ++w) {
      wt[w] = *reinterpret_cast<const float4*>(s_wt + w * NH + 4 * qd);
      v4[w] = *reinterpret_cast<const float4*>(s_o + ((w * UNITS + u) * 8 + row) * NH + 4 * qd);
    }
    float res[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float ev[NW];
#pragma unroll
      for (int w = 0; w < NW; ++w) ev[w] = (&wt[w].x)[i] * (&v4[w].x)[i];
      res[i] = tree_sum<NW>(ev);
    }
    const int k = static_cast<int>(p.cl_div.div(static_cast<unsigned>(u)));  // cl_div: / csize
    const unsigned dest = static_cast<unsigned>(u - k * csize);
    const unsigned at = smem_addr(rx_o + ((k * csize + rank) * 8 + row) * NH + 4 * qd);
    st_async_v4(map_rank(at, dest), res[0], res[1], res[2], res[3], map_rank(bar, dest));
    if (u == 0 && row == 0) {
      const float4 l4 = *reinterpret_cast<const float4*>(s_wt + NW * NH + 4 * qd);
      for (int d2 = 0; d2 < csize; ++d2)
        st_async_v4(map_rank(smem_addr(rx_l + rank * NH + 4 * qd), static_cast<unsigned>(d2)),
                    l4.x, l4.y, l4.z, l4.w, map_rank(bar, static_cast<unsigned>(d2)));
    }
  }

  // Combine this CTA's units over the cluster's splits once they have all landed (fixed
  // order: deterministic), adding the sink once. One thread per (unit k, row, head).
  mbar_wait_cluster(bar, 0);
  const int units = (UNITS - rank + csize - 1) / csize;
  T* out = static_cast<T*>(p.out) + static_cast<std::int64_t>(q0) * p.o_tok;
  constexpr int HB = NT == 1 ? 3 : 4;  // log2(NH)
  for (int it = tid; it < units * 8 * NH; it += NW * 32) {
    const int h = it & (NH - 1), row = (it >> HB) & 7, k = it >> (HB + 3);
    if (h >= p.gqa) continue;
    constexpr int R = kMaxClusterSplits;
    float lk[R + 1], v[R], w[R + 1], wv[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {  // ranks past the cluster read rank 0 and weigh 0
      const int src = r < csize ? r : 0;
      lk[r] = r < csize ? rx_l[src * NH + h] : -INFINITY;
      v[r] = rx_o[((k * csize + src) * 8 + row) * NH + h];
    }
    lk[R] = s_sink[h];  // the sink joins the denominator only
    // M is -inf when every LSE is NaN (NaN scores): softmax_base keeps them NaN.
    const float M = softmax_base(tree_max<R + 1>(lk));
#pragma unroll
    for (int r = 0; r <= R; ++r) w[r] = lk[r] == -INFINITY ? 0.f : ex2(lk[r] - M);
#pragma unroll
    for (int r = 0; r < R; ++r) wv[r] = w[r] * v[r];
    const float den = tree_sum<R + 1>(w);
    // den >= 1 when any split or the sink has a finite LSE (its term is 2^0), NaN when one is
    // NaN, 0 when every key's logit is -inf and there is no sink: 0/0, NaN as in the oracle.
    const int d = dim_of(rank + csize * k, row);
    store_rounded(out + static_cast<std::int64_t>(kvh * p.gqa + h) * p.o_head + d,
                  den != 0.f ? __fdividef(tree_sum<R>(wv), den) : NAN);
    if (p.lse != nullptr && d == 0)
      p.lse[static_cast<std::int64_t>(q0) * p.l_tok +
            static_cast<std::int64_t>(kvh * p.gqa + h) * p.l_head] =
          den != 0.f ? (M + __log2f(den)) * kLn2 : NAN;
  }
}

template <class T, int HEAD, int NT>
Status launch_small(const DecodeParams& p, int num_kv_heads, int num_seqs,
                    cudaStream_t stream) {
  auto kernel = decode_small_kernel<T, HEAD, NT>;
  const int gqa_cols = 8 * NT;
  // One attribute for every call of this instance (as the pipelined kernel's smem_limit), so
  // that a captured graph stays valid whatever runs after the capture.
  PA_CUDA_RETURN(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(decode_small_smem_max_bytes(HEAD, gqa_cols))),
                 "decode_small: cudaFuncSetAttribute");
  const dim3 grid(static_cast<unsigned>(p.max_splits), static_cast<unsigned>(num_kv_heads),
                  static_cast<unsigned>(num_seqs));
  const auto smem =
      static_cast<std::size_t>(decode_small_smem_bytes(HEAD, gqa_cols, p.max_splits));
  PA_CUDA_RETURN(launch_in_x_clusters(kernel, grid, kSmallMaxWarps * 32, smem,
                                      static_cast<unsigned>(p.max_splits), stream, p),
                 "decode_small: cluster launch");
  return Status::Ok();
}

template <class T>
Status launch_small_head(const DecodeParams& p, int head, int num_kv_heads, int num_seqs,
                         cudaStream_t stream) {
  const bool wide = p.gqa > 8;
  if (head == 64)
    return wide ? launch_small<T, 64, 2>(p, num_kv_heads, num_seqs, stream)
                : launch_small<T, 64, 1>(p, num_kv_heads, num_seqs, stream);
  return wide ? launch_small<T, 128, 2>(p, num_kv_heads, num_seqs, stream)
              : launch_small<T, 128, 1>(p, num_kv_heads, num_seqs, stream);
}

}  // namespace

Status decode_small_run(const DecodeParams& p, int head, bool bf16, int num_kv_heads,
                        int num_seqs, cudaStream_t stream) {
  return bf16 ? launch_small_head<__nv_bfloat16>(p, head, num_kv_heads, num_seqs, stream)
              : launch_small_head<__half>(p, head, num_kv_heads, num_seqs, stream);
}

}  // namespace pagedattn::cuda::decode
