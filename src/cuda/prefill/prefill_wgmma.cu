// The Hopper warpgroup-MMA prefill kernel: see prefill_wgmma.h for the design and
// wgmma_util.cuh for the swizzled tile layout and the descriptors.
//
// Thread t of the CTA: warpgroup wg = t / 128 owns CTA rows [64 wg, 64 wg + 64); inside it,
// warp w = (t / 32) % 4 and lane = 4g + q hold rows 16w + g and 16w + g + 8 (PTX ISA,
// "Matrix Fragments for wgmma.mma_async.m64nNk16"): accumulator 4j + e is (row 16w + g +
// 8 (e >> 1), column 8j + 2q + (e & 1)). So the S accumulators of key columns 16k .. 16k+15
// are, element for element, the register A fragment of the k-th 16-key step of O += P V.
//
// Shared memory (every tile 1024-byte aligned, 128B-swizzled, wgmma::tile_off):
//   Q: 128 rows x HEAD; K[stage], V[stage]: TOK tokens x HEAD (row = token);
//   ids[stage]: block id (-1 = not loaded) and in-block offset of each tile token.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "src/cuda/common/cache_index.h"
#include "src/cuda/common/cuda_common.cuh"
#include "src/cuda/common/mma_common.cuh"
#include "src/cuda/prefill/prefill_wgmma.h"
#include "src/cuda/prefill/prefill_wgmma_params.cuh"
#include "src/cuda/prefill/wgmma_util.cuh"

namespace pagedattn::cuda {

namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;


// OVERLAP: the PV GEMM of a tile is issued together with the S GEMM of the next one, so that
// the softmax of a tile runs while the tensor cores multiply the previous one (the V tile of
// tile j stays in use during tile j + 1: the loads run one stage less ahead). Not
// instantiated: measured on an H200 (head 128, 64-token tiles in 4 stages) at 181 TFLOP/s
// against 186 without it and 190 for the default 128-token tiles in 2 stages, because ptxas
// serialises its wgmmas (C7520: the PV GEMM's registers come from another path); kept for the
// next step (a producer warpgroup and mbarriers instead of the CTA barrier per tile).
template <class T, int HEAD, int TOK, int STAGES, bool OVERLAP>
__global__ void __launch_bounds__(kWgmmaThreads, 1) prefill_wgmma_kernel(const WgParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int ROWS = kWgmmaRowsPerCta;
  constexpr int NT = kWgmmaThreads;
  constexpr int CH = HEAD / 8;       // 16-byte chunks per row
  constexpr int TILE = TOK * HEAD;   // elements of one K or V tile
  constexpr int KSTEPS = HEAD / 16;  // k-steps of S = Q K^T
  constexpr int PSTEPS = TOK / 16;   // k-steps of O += P V
  constexpr int KREP = TOK * CH / NT;
  static_assert(NT == 256 && ROWS == 128, "2 warpgroups x 64 rows");
  static_assert(TOK == 64 || TOK == 128, "key tiles: the N of one wgmma, rows of the id slots");
  constexpr int LAG = OVERLAP ? 1 : 0;  // tiles whose V is still read after their iteration
  static_assert(STAGES >= 2 + LAG, "the pipeline needs two stages beyond the lag");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char* smem_al = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<std::uintptr_t>(smem_raw) + 1023) & ~std::uintptr_t{1023});
  T* sQ = reinterpret_cast<T*>(smem_al);
  T* sK = sQ + ROWS * HEAD;
  T* sV = sK + STAGES * TILE;
  int* sBlk = reinterpret_cast<int*>(sV + STAGES * TILE);  // [STAGES][TOK]
  int* sOff = sBlk + STAGES * TOK;                          // [STAGES][TOK]

  // ---- which sequence and which 128 of its rows (heavy tiles, late in a sequence, first)
  const int* ts = p.tile_start;
  const int tile = static_cast<int>(gridDim.x - 1 - blockIdx.x);
  if (tile >= ts[p.num_seqs]) return;  // uniform
  const int s = tile_sequence(ts, p.num_seqs, tile);
  const int g = blockIdx.y;
  const int G = p.gqa;
  const int q0 = p.qsl[s * p.qsl_stride];
  const int ql = p.qsl[(s + 1) * p.qsl_stride] - q0;
  const int len = p.seq_lens[s * p.sl_stride];
  const std::int64_t row0 = static_cast<std::int64_t>(tile - ts[s]) * ROWS;
  const std::int64_t nrows = static_cast<std::int64_t>(ql) * G;
  if (row0 >= nrows) return;  // device metadata disagrees with the prefix sums (uniform)
  // Row r of the CTA is (query token tb + (rem + r) / G, query head g*G + (rem + r) % G).
  const int tb = static_cast<int>(row0 / G);
  const int rem = static_cast<int>(row0 - static_cast<std::int64_t>(tb) * G);
  const int nvalid = nrows - row0 < ROWS ? static_cast<int>(nrows - row0) : ROWS;
  const int pos_first = len - ql + tb;  // absolute position of the CTA's first query token
  const int pos_last = pos_first + (rem + nvalid - 1) / G;
  const std::int64_t win_lo = std::int64_t{pos_first} - p.window + 1;
  const int kv_lo = p.window > 0 && win_lo > 0 ? static_cast<int>(win_lo) : 0;
  const int kv_hi = min(len, pos_last + 1);
  const int start = kv_lo & ~(TOK - 1);
  const int ntiles = kv_hi > kv_lo ? (kv_hi - start + TOK - 1) / TOK : 0;

  const int tid = threadIdx.x, lane = tid & 31;
  const int wg = tid >> 7, wwarp = (tid >> 5) & 3;
  const int* bt = p.block_table + static_cast<std::int64_t>(s) * p.bt_seq;
  const int bs = p.block_size;
  const T* kbase = static_cast<const T*>(p.k) + static_cast<std::int64_t>(g) * p.k_head;
  const T* vbase = static_cast<const T*>(p.v) + static_cast<std::int64_t>(g) * p.v_head;

  // Block id and in-block offset of token `tid` of tile `tl` (threads < TOK). -1 = not copied
  // (outside [kv_lo, kv_hi), a logical block past the block-table row, or a block id outside
  // the cache: memory safety for device metadata the host did not see).
  auto fetch_id = [&](int tl, int* blk, int* off) {
    const std::int64_t t = std::int64_t{start} + std::int64_t{tl} * TOK + tid;
    *blk = -1;
    *off = 0;
    if (t >= kv_lo && t < kv_hi) {
      const int ti = static_cast<int>(t);
      const int lb = ti / bs;
      const int b = lb < p.bt_width ? bt[static_cast<std::int64_t>(lb) * p.bt_blk] : -1;
      if (b >= 0 && b < p.num_blocks) {
        *blk = b;
        *off = ti - lb * bs;
      }
    }
  };
  // Copy tile `tl` into stage `stage` (its ids are in the same stage's id slots). Tokens not
  // loaded are zero-filled: their probabilities are exactly 0 and 0 * 0 adds nothing to O.
  auto issue_tile = [&](int stage) {
    T* dk = sK + stage * TILE;
    T* dv = sV + stage * TILE;
    const int* blk = sBlk + stage * TOK;
    const int* off = sOff + stage * TOK;
#pragma unroll
    for (int k = 0; k < KREP; ++k) {
      const int i = tid + k * NT;
      const int r = i / CH, c = i % CH;
      const int b = blk[r];
      const std::int64_t bo = static_cast<std::int64_t>(b);
      const T* ks = b >= 0 ? kbase + bo * p.k_blk + static_cast<std::int64_t>(off[r]) * p.k_tok +
                                 static_cast<std::int64_t>(c) * p.k_chunk
                           : kbase;
      const T* vs = b >= 0 ? vbase + bo * p.v_blk + static_cast<std::int64_t>(off[r]) * p.v_tok +
                                 static_cast<std::int64_t>(c) * p.v_chunk
                           : vbase;
      mma::cp_async16(smem_addr(dk + wgmma::tile_off(r, c, TOK)), ks, b >= 0 ? 16 : 0);
      mma::cp_async16(smem_addr(dv + wgmma::tile_off(r, c, TOK)), vs, b >= 0 ? 16 : 0);
    }
  };

  // ---- prologue: ids of the first STAGES - LAG tiles, the query tile, tiles
  // 0 .. STAGES-2-LAG. Tile t lives in stage t % STAGES; iteration it issues tile
  // it + STAGES - 1 - LAG and, at its end, stores the ids of tile it + STAGES - LAG.
  int nblk = -1, noff = 0;
  if (tid < TOK) {
#pragma unroll
    for (int st = 0; st < STAGES - LAG; ++st) {
      int b, o;
      fetch_id(st, &b, &o);
      sBlk[st * TOK + tid] = b;
      sOff[st * TOK + tid] = o;
    }
    fetch_id(STAGES - LAG, &nblk, &noff);
  }
#pragma unroll
  for (int k = 0; k < ROWS * CH / NT; ++k) {
    const int i = tid + k * NT;
    const int r = i / CH, c = i % CH;
    const bool ok = r < nvalid;
    const T* src = static_cast<const T*>(p.q);
    if (ok) {
      const int rr = rem + r;
      const int tok = q0 + tb + rr / G;
      const int head = g * G + rr % G;
      src += static_cast<std::int64_t>(tok) * p.q_tok + static_cast<std::int64_t>(head) * p.q_head +
             c * 8;
    }
    mma::cp_async16(smem_addr(sQ + wgmma::tile_off(r, c, ROWS)), src, ok ? 16 : 0);
  }
  cp_async_commit();
  __syncthreads();  // ids visible
#pragma unroll
  for (int st = 0; st < STAGES - 1 - LAG; ++st) {
    if (st < ntiles) issue_tile(st);
    cp_async_commit();
  }

  // ---- this thread's two rows
  const int wrow0 = wg * 64;                // first CTA row of the warpgroup
  const bool wg_active = wrow0 < nvalid;
  const int wg_last = min(wrow0 + 63, nvalid - 1);
  const int wg_qlo = pos_first + (rem + wrow0) / G;  // positions of the warpgroup's rows
  const int wg_qhi = pos_first + (rem + wg_last) / G;
  int qpos[2];
  float slope[2], m_run[2], l_run[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = wrow0 + wwarp * 16 + (lane >> 2) + h * 8;
    const bool ok = r < nvalid;
    const int head = g * G + (rem + r) % G;
    // Rows past the sequence see nothing (all masked on edge tiles) and are never written.
    qpos[h] = ok ? pos_first + (rem + r) / G : -1;
    slope[h] = (ok && p.alibi != nullptr)
                   ? p.alibi[static_cast<std::int64_t>(head) * p.alibi_stride] * kLog2e
                   : 0.f;
    // A sink is one more logit in the denominator: start the running state with it (its
    // exp counted once per row, by the quad's first thread). A sink of -inf is no sink.
    const bool sink = ok && p.sinks != nullptr;
    m_run[h] = sink ? p.sinks[static_cast<std::int64_t>(head) * p.sinks_stride] * kLog2e : -INFINITY;
    l_run[h] = (sink && m_run[h] != -INFINITY && (lane & 3) == 0) ? 1.f : 0.f;
  }
  float o[HEAD / 2];
#pragma unroll
  for (int i = 0; i < HEAD / 2; ++i) o[i] = 0.f;

  const std::uint32_t q_addr = smem_addr(sQ) + wrow0 * 128;

  // One key tile for the warpgroup's 64 rows; MASK applies the causal / window mask per
  // element (tiles that cut a row's edge).
  auto compute_tile = [&](int stage, int t0, auto mask_tag) {
    constexpr bool MASK = decltype(mask_tag)::value;
    const std::uint32_t k_addr = smem_addr(sK + stage * TILE);
    const std::uint32_t v_addr = smem_addr(sV + stage * TILE);
    float sc[TOK / 2];
    wgmma::fence();
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) {
      const std::uint32_t kb = (ks >> 2) * (TOK * 128) + (ks & 3) * 32;
      const std::uint32_t qb = (ks >> 2) * (ROWS * 128) + (ks & 3) * 32;
      wgmma::ss<T, TOK>(sc, wgmma::desc(q_addr + qb, 16, 1024), wgmma::desc(k_addr + kb, 16, 1024),
                        ks > 0 ? 1 : 0);
    }
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::fence_operand(sc);

    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < TOK / 2; ++i) {
      const int h = (i >> 1) & 1;
      const int j = t0 + (i >> 2) * 8 + 2 * (lane & 3) + (i & 1);
      float z = p.softcap > 0.f ? p.cap_log2 * tanhf(sc[i] * p.cap_arg) : sc[i] * p.scale_log2;
      if (p.alibi != nullptr) z += slope[h] * static_cast<float>(j - qpos[h]);
      if (MASK && !(j <= qpos[h] && (p.window <= 0 || qpos[h] - j < p.window))) z = -INFINITY;
      sc[i] = z;
      mx[h] = fmaxf(mx[h], z);
    }
    float corr[2], base[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
      const float m_new = fmaxf(m_run[h], mx[h]);
      // Nothing seen yet: exp2(-inf - -inf) would be NaN.
      corr[h] = m_new == -INFINITY ? 1.f : exp2f(m_run[h] - m_new);
      m_run[h] = m_new;
      base[h] = softmax_base(m_new);
    }
    float ps[2] = {0.f, 0.f};
#pragma unroll
    for (int i = 0; i < TOK / 2; ++i) {
      const int h = (i >> 1) & 1;
      const float pv = exp2f(sc[i] - base[h]);
      sc[i] = pv;
      ps[h] += pv;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) l_run[h] = l_run[h] * corr[h] + ps[h];
#pragma unroll
    for (int i = 0; i < HEAD / 2; ++i) o[i] *= corr[(i >> 1) & 1];
    unsigned a[PSTEPS][4];
#pragma unroll
    for (int kk = 0; kk < PSTEPS; ++kk) {
      a[kk][0] = mma::pack2<T>(sc[8 * kk + 0], sc[8 * kk + 1]);
      a[kk][1] = mma::pack2<T>(sc[8 * kk + 2], sc[8 * kk + 3]);
      a[kk][2] = mma::pack2<T>(sc[8 * kk + 4], sc[8 * kk + 5]);
      a[kk][3] = mma::pack2<T>(sc[8 * kk + 6], sc[8 * kk + 7]);
    }
    wgmma::fence_operand(o);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < PSTEPS; ++kk)
      wgmma::rs<T, HEAD, 1>(o, a[kk], wgmma::desc(v_addr + kk * 2048, TOK * 128, 1024), 1);
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::fence_operand(o);
  };

  // OVERLAP state: the P fragments of the last computed tile and its stage, whose PV GEMM
  // is not issued yet (warpgroup-uniform).
  unsigned a_prev[PSTEPS][4];
  int prev_stage = 0;
  bool pending = false;
  auto issue_pv = [&](const unsigned (&a)[PSTEPS][4], int stage) {
    const std::uint32_t v_addr = smem_addr(sV + stage * TILE);
#pragma unroll
    for (int kk = 0; kk < PSTEPS; ++kk)
      wgmma::rs<T, HEAD, 1>(o, a[kk], wgmma::desc(v_addr + kk * 2048, TOK * 128, 1024), 1);
    wgmma::commit();
    wgmma::fence_operand(o);
  };
  auto flush_pv = [&]() {
    if (!pending) return;
    wgmma::fence_operand(o);
    wgmma::fence();
    issue_pv(a_prev, prev_stage);
    wgmma::wait<0>();
    wgmma::fence_operand(o);
    pending = false;
  };
  auto overlap_tile = [&](int stage, int t0, auto mask_tag) {
    constexpr bool MASK = decltype(mask_tag)::value;
    const std::uint32_t k_addr = smem_addr(sK + stage * TILE);
    float sc[TOK / 2];
    wgmma::fence_operand(o);
    wgmma::fence();
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) {
      const std::uint32_t kb = (ks >> 2) * (TOK * 128) + (ks & 3) * 32;
      const std::uint32_t qb = (ks >> 2) * (ROWS * 128) + (ks & 3) * 32;
      wgmma::ss<T, TOK>(sc, wgmma::desc(q_addr + qb, 16, 1024), wgmma::desc(k_addr + kb, 16, 1024),
                        ks > 0 ? 1 : 0);
    }
    wgmma::commit();
    if (pending) {
      issue_pv(a_prev, prev_stage);  // runs while this tile's softmax does
      wgmma::wait<1>();              // the S GEMM (committed first) is done
    } else {
      wgmma::wait<0>();
    }
    wgmma::fence_operand(sc);
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < TOK / 2; ++i) {
      const int h = (i >> 1) & 1;
      const int j = t0 + (i >> 2) * 8 + 2 * (lane & 3) + (i & 1);
      float z = p.softcap > 0.f ? p.cap_log2 * tanhf(sc[i] * p.cap_arg) : sc[i] * p.scale_log2;
      if (p.alibi != nullptr) z += slope[h] * static_cast<float>(j - qpos[h]);
      if (MASK && !(j <= qpos[h] && (p.window <= 0 || qpos[h] - j < p.window))) z = -INFINITY;
      sc[i] = z;
      mx[h] = fmaxf(mx[h], z);
    }
    float corr[2], base[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
      const float m_new = fmaxf(m_run[h], mx[h]);
      corr[h] = m_new == -INFINITY ? 1.f : exp2f(m_run[h] - m_new);
      m_run[h] = m_new;
      base[h] = softmax_base(m_new);
    }
    float ps[2] = {0.f, 0.f};
#pragma unroll
    for (int i = 0; i < TOK / 2; ++i) {
      const int h = (i >> 1) & 1;
      const float pv = exp2f(sc[i] - base[h]);
      sc[i] = pv;
      ps[h] += pv;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) l_run[h] = l_run[h] * corr[h] + ps[h];
    // a_prev is still read by the PV GEMM in flight: the new P goes elsewhere until it landed.
    unsigned a_cur[PSTEPS][4];
#pragma unroll
    for (int kk = 0; kk < PSTEPS; ++kk) {
      a_cur[kk][0] = mma::pack2<T>(sc[8 * kk + 0], sc[8 * kk + 1]);
      a_cur[kk][1] = mma::pack2<T>(sc[8 * kk + 2], sc[8 * kk + 3]);
      a_cur[kk][2] = mma::pack2<T>(sc[8 * kk + 4], sc[8 * kk + 5]);
      a_cur[kk][3] = mma::pack2<T>(sc[8 * kk + 6], sc[8 * kk + 7]);
    }
    // The previous tile's PV must have landed before O moves to this tile's maximum.
    wgmma::wait<0>();
    wgmma::fence_operand(o);
#pragma unroll
    for (int kk = 0; kk < PSTEPS; ++kk) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        asm volatile("" : "+r"(a_prev[kk][e])::"memory");  // live until the wait above
        a_prev[kk][e] = a_cur[kk][e];
      }
    }
#pragma unroll
    for (int i = 0; i < HEAD / 2; ++i) o[i] *= corr[(i >> 1) & 1];
    prev_stage = stage;
    pending = true;
  };

  for (int it = 0; it < ntiles; ++it) {
    cp_async_wait<STAGES - 2 - LAG>();  // tile it (and the query) landed: this thread's copies
    wgmma::fence_proxy_async();         // ... visible to the tensor cores' async proxy
    __syncthreads();  // ... everyone's; and stage (it - 1 - LAG) % STAGES is free
    {
      const int nt = it + STAGES - 1 - LAG;
      if (nt < ntiles) issue_tile(nt % STAGES);
      cp_async_commit();
    }
    const int stage = it % STAGES;
    const int t0 = start + it * TOK;
    if (wg_active) {
      // Warpgroup-uniform: skip a tile none of its rows sees; mask only edge tiles.
      const std::int64_t t_last = std::int64_t{t0} + TOK - 1;
      const bool has_window = p.window > 0;
      const bool skip =
          t0 > wg_qhi || (has_window && t_last < std::int64_t{wg_qlo} - p.window + 1);
      const bool full = t_last <= wg_qlo &&
                        (!has_window || std::int64_t{t0} >= std::int64_t{wg_qhi} - p.window + 1);
      if constexpr (OVERLAP) {
        // The previous tile's PV runs in this iteration at the latest: its stage is reloaded
        // in the next one.
        if (skip)
          flush_pv();
        else if (full)
          overlap_tile(stage, t0, std::false_type{});
        else
          overlap_tile(stage, t0, std::true_type{});
      } else if (!skip) {
        if (full)
          compute_tile(stage, t0, std::false_type{});
        else
          compute_tile(stage, t0, std::true_type{});
      }
    }
    // Ids of tile it + STAGES - LAG go into its slots (read when that tile is issued, after
    // the next barrier; their previous tile was issued by now); then start loading the ids of
    // the tile after it.
    if (tid < TOK) {
      const int slot = (it + STAGES - LAG) % STAGES;
      sBlk[slot * TOK + tid] = nblk;
      sOff[slot * TOK + tid] = noff;
      fetch_id(it + STAGES - LAG + 1, &nblk, &noff);
    }
  }
  if constexpr (OVERLAP) {
    if (wg_active) flush_pv();
  }
  cp_async_wait<0>();
  if (!wg_active) return;

  // ---- epilogue: normalise and store (4-byte stores of column pairs)
  float inv[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
    // l = 0 (every logit -inf) is 0/0: NaN, as in the oracle.
    inv[h] = l_run[h] != 0.f ? 1.f / l_run[h] : NAN;
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = wrow0 + wwarp * 16 + (lane >> 2) + h * 8;
    if (r >= nvalid) continue;
    const int rr = rem + r;
    const std::int64_t tok = q0 + tb + rr / G;
    const std::int64_t head = g * G + rr % G;
    T* dst = static_cast<T*>(p.out) + tok * p.o_tok + head * p.o_head + 2 * (lane & 3);
#pragma unroll
    for (int j = 0; j < HEAD / 8; ++j)
      *reinterpret_cast<unsigned*>(dst + 8 * j) =
          mma::pack2<T>(o[4 * j + 2 * h] * inv[h], o[4 * j + 2 * h + 1] * inv[h]);
    if (p.lse != nullptr && (lane & 3) == 0)
      p.lse[tok * p.l_tok + head * p.l_head] =
          l_run[h] != 0.f ? (softmax_base(m_run[h]) + log2f(l_run[h])) * kLn2 : NAN;
  }
#elif defined(__CUDA_ARCH__)
  // Built without sm_90a features (an arch list without "90a"): fail loudly, never return
  // garbage.
  __trap();
#endif
}

template <class T, int HEAD, int TOK, int STAGES, bool OVERLAP = false>
Status launch_tiles(const WgParams& p, std::int64_t row_tiles, int num_kv_heads,
                    cudaStream_t stream) {
  auto kernel = prefill_wgmma_kernel<T, HEAD, TOK, STAGES, OVERLAP>;
  const int smem = static_cast<int>(prefill_wgmma_smem_bytes(HEAD, TOK, STAGES));
  // Per function and device, not a stream operation: legal during graph capture.
  PA_CUDA_RETURN(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
                 "prefill_wgmma: cudaFuncSetAttribute");
  const dim3 grid(static_cast<unsigned>(row_tiles), static_cast<unsigned>(num_kv_heads));
  kernel<<<grid, kWgmmaThreads, smem, stream>>>(p);
  PA_CUDA_RETURN(cudaGetLastError(), "prefill_wgmma: kernel launch");
  return Status::Ok();
}

template <class T, int HEAD>
Status launch(const WgParams& p, std::int64_t row_tiles, int num_kv_heads, cudaStream_t stream) {
  return launch_tiles<T, HEAD, prefill_wgmma_tile_tokens(HEAD), prefill_wgmma_stages(HEAD)>(
      p, row_tiles, num_kv_heads, stream);
}

}  // namespace

Status prefill_wgmma_run(const AttentionArgs& args, int block_size, std::int64_t row_tiles,
                         int min_query_len, void* workspace, Stream stream,
                         bool warp_specialized) {
  const int num_seqs = static_cast<int>(args.seq_lens.shape[0]);
  if (row_tiles <= 0 || num_seqs == 0) return Status::Ok();
  if (row_tiles > INT_MAX)
    return Status(StatusCode::kUnsupported, "prefill_wgmma: " + std::to_string(row_tiles) +
                                                " row tiles exceed the grid limit");
  const KVCache& c = args.cache;
  const bool split = c.layout == KVLayout::kSplit;
  if (split && (!warp_specialized || block_size % 8 != 0 || c.key.dtype != args.query.dtype))
    return Status(StatusCode::kInternal,
                  "prefill_wgmma: split layout on the first version, with an fp8 cache or with "
                  "block_size " + std::to_string(block_size) + " (not a multiple of 8)");
  if (!warp_specialized && c.key.dtype != args.query.dtype)
    return Status(StatusCode::kInternal, "prefill_wgmma: an fp8 cache on the first version");
  WgParams p = make_wg_params(args, block_size);
  const int num_kv_heads = mma_cache_strides(c).num_kv_heads;
  const int head = static_cast<int>(args.query.shape[2]);
  int* tile_start = static_cast<int*>(workspace);
  p.tile_start = tile_start;

  DeviceGuard guard(args.query.device.index);
  PA_CUDA_RETURN(guard.status(), "prefill_wgmma: cudaSetDevice");
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  PAGEDATTN_RETURN_IF_ERROR(launch_tile_prefix(p.qsl, p.qsl_stride, num_seqs, kWgmmaRowsPerCta,
                                               p.gqa, min_query_len, INT_MAX, tile_start, st));
  const bool bf16 = args.query.dtype == DType::kBFloat16;
  if (warp_specialized)
    return prefill_ws_launch(p, head, bf16, c.key.dtype, split, row_tiles, num_kv_heads, st);
  if (head == 64)
    return bf16 ? launch<__nv_bfloat16, 64>(p, row_tiles, num_kv_heads, st)
                : launch<__half, 64>(p, row_tiles, num_kv_heads, st);
  if (head == 128)
    return bf16 ? launch<__nv_bfloat16, 128>(p, row_tiles, num_kv_heads, st)
                : launch<__half, 128>(p, row_tiles, num_kv_heads, st);
  if (head == 256)
    return bf16 ? launch<__nv_bfloat16, 256>(p, row_tiles, num_kv_heads, st)
                : launch<__half, 256>(p, row_tiles, num_kv_heads, st);
  return Status(StatusCode::kInternal, "prefill_wgmma: head_size " + std::to_string(head));
}

}  // namespace pagedattn::cuda
