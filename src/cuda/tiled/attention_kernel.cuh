// The CUDA general tiled attention kernel (DESIGN.md §2, §3): one kernel family for decode and
// chunked prefill, any layout / block size / stride, online softmax in fp32.
//
// Grid: x = query-row tile (a sequence's query tokens cut into tiles of q_tokens; the tile's
// sequence is found by binary search in per-sequence prefix sums that a prep kernel computes
// from query_start_loc), y = KV head x head group, z = KV split. One CTA (128 threads) owns
// rows = q_tokens x heads_per_cta (query token, query head) pairs of one KV head (GQA packing:
// each K/V element is read once for all query heads of its KV head) and walks the keys the
// rows need in tiles of tile_tokens (<= 64) tokens staged in shared memory (double-buffered,
// cp.async where alignment allows). Each tile token maps to (block_table[j / block_size],
// j % block_size): tile size is independent of block size.
//
// Per tile:  QK   thread (t = tid % 64, half = tid / 64) computes the scores of token t for
//                 rows half, half + 2, ... (K row from shared memory, Q rows broadcast).
//            softmax  warp w owns rows w, w + 4, ...: tile max, rescale, probabilities.
//            PV   the same warp accumulates its rows; lane l owns the head-dim pairs
//                 l, l + 32, ... (KP pairs per lane, KP = ceil(head_size / 64)).
//
// Memory safety: every global address is computed only for in-range indices (rows < num_tokens,
// d < head_size, tokens inside [lo, hi) of the sequence, block ids checked against num_blocks);
// tokens outside the range are zero-filled in shared memory, never loaded, so NaN-poisoned
// memory that the math does not use never reaches a product (0 * NaN).
#pragma once

#include <cstdint>

#include "src/cuda/common/cuda_common.cuh"
#include "src/cuda/tiled/attention_params.h"

namespace pagedattn::cuda {

/// Element type used for element-wise copies of a cache of ES-byte elements.
template <int ES>
struct ElemBits;
template <>
struct ElemBits<4> {
  using T = unsigned int;
};
template <>
struct ElemBits<2> {
  using T = unsigned short;
};
template <>
struct ElemBits<1> {
  using T = unsigned char;
};

/// Load one K or V tile (tokens [j0, j0 + tile_rows)) into `dst` (row stride `row_bytes`).
/// Tokens outside [klo, khi), past tile_tokens, or with an invalid block are zero-filled, never
/// loaded. With unit > 0 every item is one cp.async of `unit` bytes; otherwise (the split
/// layout's value, or strides that are not 4-byte multiples) items are single elements copied
/// through registers, 8 independent loads in flight per thread before the stores.
template <int ES>
__device__ __forceinline__ void load_tile(const AttnParams& p, bool is_key, std::int64_t j0,
                                          std::int64_t klo, std::int64_t khi, int kvh,
                                          const std::int32_t* bt_row, unsigned char* dst,
                                          int row_bytes) {
  const int rows = p.tile_rows;
  const int unit = is_key ? p.k_unit : p.v_unit;
  const int ue = unit > 0 ? unit / ES : 1;
  const int upr = p.head_size / ue;
  const int items = rows * upr;
  const bool t_fast = p.layout == kLayoutSplit;
  const unsigned char* base = static_cast<const unsigned char*>(is_key ? p.k : p.v);
  const int nt = static_cast<int>(blockDim.x);
  if (unit > 0) {
    for (int i = threadIdx.x; i < items; i += nt) {
      const TileUnit u = tile_unit(i, rows, upr, ue, t_fast);
      const std::int64_t j = j0 + u.t;
      BlockPos bp{-1, 0};
      if (u.t < p.tile_tokens && j >= klo && j < khi)
        bp = lookup_block(bt_row, p.bt_blk, p.bt_width, j, p.block_size, p.num_blocks);
      unsigned char* d = dst + u.t * row_bytes + u.d * ES;
      if (bp.block >= 0) {
        const std::int64_t e =
            is_key ? key_offset(p.layout, p.x, p.ks, bp.block, bp.offset, kvh, u.d)
                   : value_offset(p.layout, p.vs, bp.block, bp.offset, kvh, u.d);
        const unsigned char* src = base + e * ES;
        if (unit == 16) cp_async<16>(d, src);
        else if (unit == 8) cp_async<8>(d, src);
        else cp_async<4>(d, src);
      } else if (unit == 16) {
        *reinterpret_cast<uint4*>(d) = make_uint4(0, 0, 0, 0);
      } else if (unit == 8) {
        *reinterpret_cast<uint2*>(d) = make_uint2(0, 0);
      } else {
        *reinterpret_cast<std::uint32_t*>(d) = 0u;
      }
    }
    return;
  }
  using E = typename ElemBits<ES>::T;
  constexpr int kBatch = 8;
  for (int i0 = threadIdx.x; i0 < items; i0 += kBatch * nt) {
    E val[kBatch];
    int off[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = i0 + b * nt;
      val[b] = 0;
      off[b] = -1;
      if (i < items) {
        const TileUnit u = tile_unit(i, rows, upr, 1, t_fast);
        off[b] = u.t * row_bytes + u.d * ES;
        const std::int64_t j = j0 + u.t;
        if (u.t < p.tile_tokens && j >= klo && j < khi) {
          const BlockPos bp = lookup_block(bt_row, p.bt_blk, p.bt_width, j, p.block_size, p.num_blocks);
          if (bp.block >= 0) {
            const std::int64_t e =
                is_key ? key_offset(p.layout, p.x, p.ks, bp.block, bp.offset, kvh, u.d)
                       : value_offset(p.layout, p.vs, bp.block, bp.offset, kvh, u.d);
            val[b] = __ldg(reinterpret_cast<const E*>(base + e * ES));
          }
        }
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
      if (off[b] >= 0) *reinterpret_cast<E*>(dst + off[b]) = val[b];
  }
}

template <class Q, int KV, int KP, int MMAX>
__global__ void __launch_bounds__(kTiledThreads, 1) tiled_attention_kernel(const AttnParams p) {
  using Cache = CacheTraits<Q, KV>;
  constexpr int ES = Cache::kBytes;
  constexpr int VE = 16 / ES;   // cache elements per 16 bytes
  constexpr int RPT = MMAX / 2;  // QK rows per thread
  constexpr int RPW = MMAX / 4;  // softmax / PV rows per warp
  static_assert(kTiledThreads == 128, "the thread mappings assume 4 warps");

  extern __shared__ __align__(16) unsigned char smem[];
  float* sQ = reinterpret_cast<float*>(smem + p.smem.off_q);
  unsigned char* sK = smem + p.smem.off_k;
  unsigned char* sV = smem + p.smem.off_v;
  float* sS = reinterpret_cast<float*>(smem + p.smem.off_s);
  int* sTok = reinterpret_cast<int*>(smem + p.smem.off_rows);
  int* sHead = sTok + MMAX;
  int* sQpos = sHead + MMAX;
  float* sSlope = reinterpret_cast<float*>(sQpos + MMAX);
  float* sRunMax = sSlope + MMAX;
  float* sRunSum = sRunMax + MMAX;

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int tile = static_cast<int>(blockIdx.x);
  const int kvh = static_cast<int>(blockIdx.y) / p.head_groups;
  const int hgrp = static_cast<int>(blockIdx.y) - kvh * p.head_groups;
  const int split = static_cast<int>(blockIdx.z);

  // ---- which sequence and which of its query tokens
  const std::int32_t* ts = p.tile_start;
  if (tile >= ts[p.num_seqs]) return;  // uniform
  const int seq = tile_sequence(ts, p.num_seqs, tile);
  const std::int64_t r = tile - ts[seq];
  const std::int64_t q_begin = p.qsl[seq * p.qsl_stride];
  const std::int64_t q_end = p.qsl[(seq + 1) * p.qsl_stride];
  const std::int64_t seq_len = p.seq_lens[seq * p.sl_stride];
  const std::int64_t ctx = seq_len - (q_end - q_begin);
  const std::int64_t tok0 = q_begin + r * p.q_tokens;
  std::int64_t tok_end = tok0 + p.q_tokens;
  if (tok_end > q_end) tok_end = q_end;
  if (tok_end > p.num_tokens) tok_end = p.num_tokens;
  const std::int32_t* bt_row = p.block_table + seq * p.bt_seq;
  const int D = p.head_size;
  const int T4 = p.tile_rows;
  const int rows = p.rows;

  // ---- row descriptors
  if (tid < MMAX) {
    const int m = tid;
    int tokrow = -1, head = 0, qpos = 0;
    float slope = 0.f, rmax = -INFINITY, rsum = 0.f;
    if (m < rows) {
      const RowMap rm = row_map(m, p.heads_per_cta, hgrp);
      const std::int64_t t = tok0 + rm.q_tok;
      if (rm.q_tok < p.q_tokens && rm.head_in < p.gqa && t >= 0 && t < tok_end) {
        tokrow = static_cast<int>(t);
        head = kvh * p.gqa + rm.head_in;
        qpos = static_cast<int>(ctx + (t - q_begin));
        if (p.alibi) slope = p.alibi[head * p.alibi_stride];
        if (p.sinks && split == 0) {
          rmax = p.sinks[head * p.sinks_stride];
          // e^(sink - max): 1 at the start, but 0 for a sink of -inf (no sink), which must
          // not give a split 0 without keys the weight of a logit 0 in the merge.
          rsum = rmax == -INFINITY ? 0.f : 1.f;
        }
      }
    }
    sTok[m] = tokrow;
    sHead[m] = head;
    sQpos[m] = qpos;
    sSlope[m] = slope;
    sRunMax[m] = rmax;
    sRunSum[m] = rsum;
  }

  // ---- keys this CTA (and split) reads: [kr.lo, kr.hi)
  const KeyRange rows_kr = cta_key_range(q_begin, q_end, tok0, tok_end, seq_len, p.window);
  // Fixed-token cuts split decode rows only: a prefill chunk (query_len >= 2) keeps its keys in
  // split 0, as in a mixed batch, whose tiled part never splits (the merge would visit the
  // decode rows of the decode fast path), so that its bits do not depend on the batch either.
  const bool unsplit = p.split_tokens > 0 && q_end - q_begin >= 2;
  KeyRange kr =
      p.split_tokens > 0
          ? split_range_fixed(rows_kr.lo, rows_kr.hi, seq_len, unsplit ? 1 : p.num_splits, split,
                              p.split_tokens)
          : split_range(rows_kr.lo, rows_kr.hi, seq_len, p.num_splits, split, p.tile_tokens);
  if (unsplit && split > 0) kr.hi = kr.lo;
  // The first tile starts at kr.lo, or on the absolute tile grid below it (tile_grid): the keys
  // of that tile before kr.lo are masked (zero-filled, never loaded, scores -inf).
  const std::int64_t walk_lo = p.tile_grid ? kr.lo / p.tile_tokens * p.tile_tokens : kr.lo;
  const int n_tiles =
      kr.hi > kr.lo ? static_cast<int>((kr.hi - walk_lo + p.tile_tokens - 1) / p.tile_tokens) : 0;
  // Scales of this KV head: read on the device (never on the host) when the cache has scale
  // tensors, so that a replayed CUDA graph uses their current values.
  const float score_scale = p.score_scale * cache_scale(p.k_scales, p.scales_stride, kvh, 1.f);
  const float v_scale = cache_scale(p.v_scales, p.scales_stride, kvh, p.v_scale);

  __syncthreads();  // row descriptors visible

  // A split without keys for this CTA (fixed-token cuts give short sequences many of them):
  // only its empty state, which the merge skips; nothing else is read. Split 0 with a sink
  // is not empty (the sink is its state).
  if (n_tiles == 0 && p.num_splits > 1 && (split > 0 || !p.sinks)) {
    for (int m = tid; m < rows; m += kTiledThreads) {
      if (sTok[m] < 0) continue;
      const std::int64_t idx =
          (static_cast<std::int64_t>(split) * p.num_tokens + sTok[m]) * p.num_heads + sHead[m];
      p.part_lse[idx] = -INFINITY;
    }
    return;
  }

  // ---- Q rows -> shared memory (fp32, zero past head_size and for empty rows)
  const int qs = p.smem.q_stride;
  for (int i = tid; i < MMAX * qs; i += kTiledThreads) {
    const int m = i / qs;
    const int d = i - m * qs;
    float v = 0.f;
    const int tr = sTok[m];
    if (tr >= 0 && d < D)
      v = to_float<Q>(static_cast<const Q*>(p.q)[static_cast<std::int64_t>(tr) * p.q_tok +
                                                  static_cast<std::int64_t>(sHead[m]) * p.q_head + d]);
    sQ[i] = v;
  }
  // ---- the bytes between head_size and the next 16-byte boundary of each key row (fp8 with
  // head_size % 16 == 8) are read by the QK step: make them zeros, never left uninitialised.
  {
    const int kb = D * ES;
    const int tail = ((kb + 15) & ~15) - kb;
    if (tail > 0) {
      for (int i = tid; i < 2 * T4 * tail; i += kTiledThreads) {
        const int row = i / tail;
        sK[row * p.smem.k_row_bytes + kb + (i - row * tail)] = 0;
      }
    }
  }

  // ---- per-warp row ownership
  bool row_ok[RPW];
#pragma unroll
  for (int k = 0; k < RPW; ++k) {
    const int m = warp + 4 * k;
    row_ok[k] = m < rows && sTok[m] >= 0;
  }
  float2 acc[RPW][KP];
#pragma unroll
  for (int k = 0; k < RPW; ++k)
#pragma unroll
    for (int j = 0; j < KP; ++j) acc[k][j] = make_float2(0.f, 0.f);

  const int krb = p.smem.k_row_bytes;
  const int vrb = p.smem.v_row_bytes;
  if (n_tiles > 0) {
    load_tile<ES>(p, true, walk_lo, kr.lo, kr.hi, kvh, bt_row, sK, krb);
    load_tile<ES>(p, false, walk_lo, kr.lo, kr.hi, kvh, bt_row, sV, vrb);
    cp_async_commit();
  }
  const int t_mine = tid & 63;
  const int half = tid >> 6;
  for (int it = 0; it < n_tiles; ++it) {
    const int stage = it & 1;
    const std::int64_t j0 = walk_lo + static_cast<std::int64_t>(it) * p.tile_tokens;
    if (it + 1 < n_tiles) {
      const std::int64_t jn = j0 + p.tile_tokens;
      load_tile<ES>(p, true, jn, kr.lo, kr.hi, kvh, bt_row, sK + (stage ^ 1) * T4 * krb, krb);
      load_tile<ES>(p, false, jn, kr.lo, kr.hi, kvh, bt_row, sV + (stage ^ 1) * T4 * vrb, vrb);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // tile `it` (and on the first pass, Q) visible to all threads

    // ---- QK: scores of token t_mine for rows half, half + 2, ...
    if (t_mine < T4) {
      float s[RPT];
#pragma unroll
      for (int k = 0; k < RPT; ++k) s[k] = 0.f;
      const unsigned char* krow = sK + stage * T4 * krb + t_mine * krb;
      const int nchunks = (D * ES + 15) >> 4;
      for (int c = 0; c < nchunks; ++c) {
        const uint4 raw = *reinterpret_cast<const uint4*>(krow + c * 16);
        float kf[VE];
        convert16<Q, KV>(raw, kf);
#pragma unroll
        for (int k = 0; k < RPT; ++k) {
          const int m = half + 2 * k;
          if (m < rows) {
            const float4* qv = reinterpret_cast<const float4*>(sQ + m * qs + c * VE);
            float a = s[k];
#pragma unroll
            for (int e = 0; e < VE / 4; ++e) {
              const float4 q4 = qv[e];
              a = fmaf(q4.x, kf[4 * e + 0], a);
              a = fmaf(q4.y, kf[4 * e + 1], a);
              a = fmaf(q4.z, kf[4 * e + 2], a);
              a = fmaf(q4.w, kf[4 * e + 3], a);
            }
            s[k] = a;
          }
        }
      }
      const std::int64_t j = j0 + t_mine;
      const bool tok_ok = t_mine < p.tile_tokens && j >= kr.lo && j < kr.hi;
#pragma unroll
      for (int k = 0; k < RPT; ++k) {
        const int m = half + 2 * k;
        if (m < rows) {
          float z = -INFINITY;
          const int qp = sQpos[m];
          if (tok_ok && sTok[m] >= 0 && key_allowed(j, qp, p.window)) {
            z = s[k] * score_scale;
            if (p.softcap > 0.f) z = p.softcap * tanhf(z / p.softcap);
            if (p.alibi) z += sSlope[m] * static_cast<float>(j - qp);
          }
          sS[m * T4 + t_mine] = z;
        }
      }
    }
    __syncthreads();  // scores visible

    // ---- online softmax of the warp's rows
#pragma unroll
    for (int k = 0; k < RPW; ++k) {
      if (!row_ok[k]) continue;  // warp-uniform
      const int m = warp + 4 * k;
      float* srow = sS + m * T4;
      const float v0 = lane < T4 ? srow[lane] : -INFINITY;
      const float v1 = lane + 32 < T4 ? srow[lane + 32] : -INFINITY;
      const float mx = warp_max(fmaxf(v0, v1));
      const float m_old = sRunMax[m];
      const float m_new = fmaxf(m_old, mx);
      // alpha is 0 rather than 1 while m_new is -inf: the state is then 0 (or NaN) anyway.
      const float base = softmax_base(m_new);
      const float alpha = expf(m_old - base);
      const float p0 = expf(v0 - base);
      const float p1 = expf(v1 - base);
      if (lane < T4) srow[lane] = p0;
      if (lane + 32 < T4) srow[lane + 32] = p1;
      const float sum = warp_sum(p0 + p1);
      const float l_old = sRunSum[m];
      __syncwarp();
      if (lane == 0) {
        sRunMax[m] = m_new;
        sRunSum[m] = l_old * alpha + sum;
      }
#pragma unroll
      for (int j = 0; j < KP; ++j) {
        acc[k][j].x *= alpha;
        acc[k][j].y *= alpha;
      }
    }
    __syncwarp();  // probabilities of the warp's rows visible to its lanes

    // ---- PV
    const unsigned char* vt = sV + stage * T4 * vrb;
    for (int t0 = 0; t0 < T4; t0 += 4) {
      float4 pr[RPW];
#pragma unroll
      for (int k = 0; k < RPW; ++k)
        pr[k] = row_ok[k] ? *reinterpret_cast<const float4*>(sS + (warp + 4 * k) * T4 + t0)
                          : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
      for (int tt = 0; tt < 4; ++tt) {
        const unsigned char* vrow = vt + (t0 + tt) * vrb;
#pragma unroll
        for (int j = 0; j < KP; ++j) {
          const int pair = lane + 32 * j;
          if (2 * pair < D) {
            const float2 v = load_pair<Q, KV>(vrow + 2 * pair * ES);
#pragma unroll
            for (int k = 0; k < RPW; ++k) {
              if (row_ok[k]) {
                const float pk = tt == 0 ? pr[k].x : tt == 1 ? pr[k].y : tt == 2 ? pr[k].z : pr[k].w;
                acc[k][j].x = fmaf(pk, v.x, acc[k][j].x);
                acc[k][j].y = fmaf(pk, v.y, acc[k][j].y);
              }
            }
          }
        }
      }
    }
    __syncthreads();  // everyone is done with this stage and the scores before they are reused
  }

  // ---- epilogue: normalise and write (or write the split's partial state)
#pragma unroll
  for (int k = 0; k < RPW; ++k) {
    if (!row_ok[k]) continue;
    const int m = warp + 4 * k;
    const float l = sRunSum[m];
    const float mrow = sRunMax[m];
    // NaN scores make l NaN, which passes through both (l != 0). l = 0: a split without keys
    // (weight 0 in the merge) or, for a whole row (one split), every logit -inf with no sink:
    // 0/0, NaN as in the oracle (every written row has keys: its own position at least).
    const bool whole = p.num_splits == 1;
    const float inv = l != 0.f ? v_scale / l : (whole ? NAN : 0.f);
    const float lse = l != 0.f ? softmax_base(mrow) + logf(l) : (whole ? NAN : -INFINITY);
    const std::int64_t tr = sTok[m];
    const std::int64_t head = sHead[m];
    if (p.num_splits == 1) {
      Q* o = static_cast<Q*>(p.out) + tr * p.o_tok + head * p.o_head;
#pragma unroll
      for (int j = 0; j < KP; ++j) {
        const int pair = lane + 32 * j;
        if (2 * pair < D) {
          store_rounded<Q>(o + 2 * pair, acc[k][j].x * inv);
          store_rounded<Q>(o + 2 * pair + 1, acc[k][j].y * inv);
        }
      }
      if (p.lse && lane == 0) p.lse[tr * p.l_tok + head * p.l_head] = lse;
    } else {
      const std::int64_t idx = (static_cast<std::int64_t>(split) * p.num_tokens + tr) * p.num_heads + head;
      float* po = p.part_out + idx * D;
#pragma unroll
      for (int j = 0; j < KP; ++j) {
        const int pair = lane + 32 * j;
        if (2 * pair < D) *reinterpret_cast<float2*>(po + 2 * pair) =
            make_float2(acc[k][j].x * inv, acc[k][j].y * inv);
      }
      if (lane == 0) p.part_lse[idx] = lse;
    }
  }
}

/// Launch one instantiation (defined in the attention_inst_*.cu files). `smem_optin`: the
/// device's opt-in shared-memory limit per block, which the caller has checked p.smem.total
/// against.
template <class Q, int KV>
cudaError_t launch_tiled(const AttnParams& p, int kp, int mmax, dim3 grid, int smem_optin,
                         cudaStream_t stream);

template <class Q, int KV, int KP, int MMAX>
cudaError_t launch_tiled_one(const AttnParams& p, dim3 grid, int smem_optin, cudaStream_t stream) {
  auto kernel = tiled_attention_kernel<Q, KV, KP, MMAX>;
  const int smem = p.smem.total;
  if (smem > 48 * 1024) {
    // The attribute belongs to the function on this device, not to this launch, and calls of
    // one instance need different sizes (tile, head size, layout). Setting it to this call's
    // size let a concurrent call on another host thread lower it between our set and our
    // launch (cudaErrorInvalidValue). One value for every call of a device, its opt-in limit
    // (the kernel has no static shared memory), removes the race; run_attention has checked
    // smem <= that limit.
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               smem_optin > smem ? smem_optin : smem);
    if (e != cudaSuccess) return e;
  }
  kernel<<<grid, kTiledThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

#define PAGEDATTN_DEFINE_LAUNCH_TILED(QTYPE, KVKIND)                                            \
  template <>                                                                                   \
  cudaError_t launch_tiled<QTYPE, KVKIND>(const AttnParams& p, int kp, int mmax, dim3 grid,     \
                                          int smem_optin, cudaStream_t stream) {                \
    const int o = smem_optin;                                                                   \
    switch (kp) {                                                                               \
      case 1:                                                                                   \
        return mmax == 16 ? launch_tiled_one<QTYPE, KVKIND, 1, 16>(p, grid, o, stream)           \
                          : launch_tiled_one<QTYPE, KVKIND, 1, 64>(p, grid, o, stream);          \
      case 2:                                                                                   \
        return mmax == 16 ? launch_tiled_one<QTYPE, KVKIND, 2, 16>(p, grid, o, stream)           \
                          : launch_tiled_one<QTYPE, KVKIND, 2, 64>(p, grid, o, stream);          \
      case 3:                                                                                   \
        return mmax == 16 ? launch_tiled_one<QTYPE, KVKIND, 3, 16>(p, grid, o, stream)           \
                          : launch_tiled_one<QTYPE, KVKIND, 3, 32>(p, grid, o, stream);          \
      case 4:                                                                                   \
        return mmax == 16 ? launch_tiled_one<QTYPE, KVKIND, 4, 16>(p, grid, o, stream)           \
                          : launch_tiled_one<QTYPE, KVKIND, 4, 32>(p, grid, o, stream);          \
      case 5:                                                                                   \
      case 6:                                                                                   \
      case 7:                                                                                   \
      case 8: /* head 264..512: one instance (16 rows), the pairs past head_size idle */       \
        return mmax == 16 ? launch_tiled_one<QTYPE, KVKIND, 8, 16>(p, grid, o, stream)           \
                          : cudaErrorInvalidValue;                                              \
      default: return cudaErrorInvalidValue;                                                    \
    }                                                                                           \
  }

}  // namespace pagedattn::cuda
