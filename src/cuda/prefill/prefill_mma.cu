// The CUDA tensor-core prefill kernel: see prefill_mma.h for the design.
//
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16 with floating point type"),
// lane = 4 * g + t (g = lane / 4, t = lane % 4):
//   A 16x16 (row): a[0] = (row g, cols 2t, 2t+1), a[1] = (row g+8, cols 2t, 2t+1),
//                  a[2] = (row g, cols 2t+8, 2t+9), a[3] = (row g+8, cols 2t+8, 2t+9);
//   B 16x8 (col):  b0 = (rows 2t, 2t+1, col g), b1 = (rows 2t+8, 2t+9, col g);
//   C/D 16x8:      c[0..1] = (row g, cols 2t, 2t+1), c[2..3] = (row g+8, cols 2t, 2t+1).
// So the S accumulators of key n-tiles 2k and 2k+1 are, element for element, the A operand
// of the k-th 16-key step of O += P V (no shuffle, no shared memory).
//
// Shared memory (16-bit elements; every tile row is XOR-swizzled in 16-byte chunks, swz()):
//   K[stage]: 64 tokens x HEAD (row = token), the query tile lives in K[STAGES - 1] until
//             that stage is first filled, and the output is staged in K[0] at the end;
//   V[stage]: 64 tokens x HEAD (nhd/hnd), or HEAD x 64 tokens for the split layout, whose
//             value rows are head dims with tokens contiguous;
//   ids[stage]: block id (-1 = not loaded) and in-block offset of each tile token.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "src/cuda/common/cache_index.h"
#include "src/cuda/common/cuda_common.cuh"
#include "src/cuda/common/mma_common.cuh"
#include "src/cuda/prefill/prefill_mma.h"

namespace pagedattn::cuda {

namespace {

using namespace mma;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

struct PrefillParams {
  const void* q;
  std::int64_t q_tok, q_head;
  void* out;
  std::int64_t o_tok, o_head;
  float* lse;  // null = not requested
  std::int64_t l_tok, l_head;
  const void* k;
  const void* v;
  // key element (block b, kv head g, token t, 8-element chunk c) at
  //   b*k_blk + g*k_head + t*k_tok + c*k_chunk (+ 0..7)
  std::int64_t k_blk, k_head, k_tok, k_chunk;
  // value, nhd/hnd: the same form; split: b*v_blk + g*v_head + d*v_dim + t
  std::int64_t v_blk, v_head, v_tok, v_chunk, v_dim;
  const int* block_table;
  std::int64_t bt_seq, bt_blk, bt_width;
  std::int64_t num_blocks;
  const int* seq_lens;
  std::int64_t sl_stride;
  const int* qsl;
  std::int64_t qsl_stride;
  int num_seqs, gqa, block_size, window;
  // Logits in log2 units (the softmax uses exp2): without softcap z = s * scale_log2; with
  // softcap c, z = cap_log2 * tanh(s * cap_arg) with cap_arg = scale / c, cap_log2 = c*log2(e).
  float scale_log2;
  float softcap;
  float cap_arg, cap_log2;
  const float* alibi;  // null = off
  std::int64_t alibi_stride;
  const float* sinks;  // null = off
  std::int64_t sinks_stride;
  const int* tile_start;  // [num_seqs + 1], written by launch_tile_prefix
};

// Head 64: three CTAs per SM (shared memory and registers); head 128: two.
template <class T, int HEAD, bool SPLIT, int STAGES>
__global__ void __launch_bounds__(kPrefillThreads, HEAD <= 64 ? 3 : 2)
    prefill_mma_kernel(const PrefillParams p) {
  constexpr int TOK = kPrefillTileTokens;
  constexpr int NT = kPrefillThreads;
  constexpr int CH = HEAD / 8;        // 16-byte chunks per K row (and per Q / out row)
  constexpr int TILE = TOK * HEAD;    // elements of one K or V tile
  constexpr int KSTEPS = HEAD / 16;   // k-steps of S = Q K^T
  constexpr int DT = HEAD / 8;        // n-tiles of O
  constexpr int KREP = TOK * CH / NT; // 16-byte copies per thread per K (or V) tile
  static_assert(NT == 128 && TOK == 64 && kPrefillRowsPerCta == 64, "4 warps x 16 rows");
  static_assert(STAGES >= 2, "the pipeline needs two stages");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sK = reinterpret_cast<T*>(smem_raw);
  T* sV = sK + STAGES * TILE;
  int* sBlk = reinterpret_cast<int*>(sV + STAGES * TILE);  // [STAGES][TOK]
  int* sOff = sBlk + STAGES * TOK;                          // [STAGES][TOK]
  T* sQ = sK + (STAGES - 1) * TILE;

  // ---- which sequence and which 64 of its rows (heavy tiles, late in a sequence, first)
  const int* ts = p.tile_start;
  const int tile = static_cast<int>(gridDim.x - 1 - blockIdx.x);
  if (tile >= ts[p.num_seqs]) return;  // uniform
  const int s = tile_sequence(ts, p.num_seqs, tile);
  const int g = blockIdx.y;
  const int G = p.gqa;
  const int q0 = p.qsl[s * p.qsl_stride];
  const int ql = p.qsl[(s + 1) * p.qsl_stride] - q0;
  const int len = p.seq_lens[s * p.sl_stride];
  const std::int64_t row0 = static_cast<std::int64_t>(tile - ts[s]) * kPrefillRowsPerCta;
  const std::int64_t nrows = static_cast<std::int64_t>(ql) * G;
  if (row0 >= nrows) return;  // device metadata disagrees with the prefix sums (uniform)
  // Row r of the CTA is (query token tb + (rem + r) / G, query head g*G + (rem + r) % G).
  const int tb = static_cast<int>(row0 / G);
  const int rem = static_cast<int>(row0 - static_cast<std::int64_t>(tb) * G);
  const int nvalid =
      nrows - row0 < kPrefillRowsPerCta ? static_cast<int>(nrows - row0) : kPrefillRowsPerCta;
  const int pos_first = len - ql + tb;  // absolute position of the CTA's first query token
  const int pos_last = pos_first + (rem + nvalid - 1) / G;
  // Keys some row of the CTA sees: [kv_lo, kv_hi); tiles start on 64-token boundaries of
  // absolute positions (so a split-layout 8-token value chunk never crosses a block).
  const std::int64_t win_lo = std::int64_t{pos_first} - p.window + 1;
  const int kv_lo = p.window > 0 && win_lo > 0 ? static_cast<int>(win_lo) : 0;
  const int kv_hi = min(len, pos_last + 1);
  // Tokens actually copied: the split layout copies whole 8-token value chunks, so it loads
  // from the chunk of kv_lo on (same block: block_size % 8 == 0); those extra keys are
  // finite data of this sequence whose probability is exactly 0.
  const int ld_lo = SPLIT ? (kv_lo & ~7) : kv_lo;
  const int start = kv_lo & ~(TOK - 1);
  const int ntiles = kv_hi > kv_lo ? (kv_hi - start + TOK - 1) / TOK : 0;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int* bt = p.block_table + static_cast<std::int64_t>(s) * p.bt_seq;
  const int bs = p.block_size;
  const T* kbase = static_cast<const T*>(p.k) + static_cast<std::int64_t>(g) * p.k_head;
  const T* vbase = static_cast<const T*>(p.v) + static_cast<std::int64_t>(g) * p.v_head;

  // Block id and in-block offset of token `tid` of tile `tl` (threads < 64). -1 = not copied
  // (outside [ld_lo, kv_hi), a logical block past the block-table row, or a block id outside
  // the cache: memory safety for device metadata the host did not see).
  auto fetch_id = [&](int tl, int* blk, int* off) {
    const std::int64_t t = std::int64_t{start} + std::int64_t{tl} * TOK + tid;
    *blk = -1;
    *off = 0;
    if (t >= ld_lo && t < kv_hi) {
      const int ti = static_cast<int>(t);
      const int lb = ti / bs;
      const int b = lb < p.bt_width ? bt[static_cast<std::int64_t>(lb) * p.bt_blk] : -1;
      if (b >= 0 && b < p.num_blocks) {
        *blk = b;
        *off = ti - lb * bs;
      }
    }
  };
  // Copy tile `tl` into stage `stage` (its ids are in the same stage's id slots).
  auto issue_tile = [&](int tl, int stage) {
    T* dk = sK + stage * TILE;
    T* dv = sV + stage * TILE;
    const int* blk = sBlk + stage * TOK;
    const int* off = sOff + stage * TOK;
#pragma unroll
    for (int k = 0; k < KREP; ++k) {
      // split keys: neighbouring threads take neighbouring tokens of one chunk (contiguous
      // 16-byte pieces in that layout); nhd/hnd: neighbouring chunks of one token row.
      const int r = SPLIT ? tid % TOK : tid / CH + k * (NT / CH);
      const int c = SPLIT ? tid / TOK + k * (NT / TOK) : tid % CH;
      const int b = blk[r];
      const T* src = b >= 0 ? kbase + static_cast<std::int64_t>(b) * p.k_blk +
                                  static_cast<std::int64_t>(off[r]) * p.k_tok +
                                  static_cast<std::int64_t>(c) * p.k_chunk
                            : kbase;
      cp_async16(smem_addr(dk + swz(r, c, HEAD)), src, b >= 0 ? 16 : 0);
    }
    if constexpr (SPLIT) {
      // An 8-token chunk of one head dim, inside one block. Bytes at or past kv_hi are
      // zero-filled (the tail of the last block may hold anything, NaN included).
      const int j = tid % (TOK / 8);
      const int b = blk[j * 8];
      const int tt = start + tl * TOK + j * 8;
      const int bytes = b >= 0 ? 2 * min(8, kv_hi - tt) : 0;
      const std::int64_t base = b >= 0 ? static_cast<std::int64_t>(b) * p.v_blk + off[j * 8] : 0;
#pragma unroll
      for (int k = 0; k < HEAD * (TOK / 8) / NT; ++k) {
        const int d = tid / (TOK / 8) + k * (NT / (TOK / 8));
        const T* src = b >= 0 ? vbase + base + static_cast<std::int64_t>(d) * p.v_dim : vbase;
        cp_async16(smem_addr(dv + swz(d, j, TOK)), src, bytes);
      }
    } else {
#pragma unroll
      for (int k = 0; k < KREP; ++k) {
        const int r = tid / CH + k * (NT / CH);
        const int c = tid % CH;
        const int b = blk[r];
        const T* src = b >= 0 ? vbase + static_cast<std::int64_t>(b) * p.v_blk +
                                    static_cast<std::int64_t>(off[r]) * p.v_tok +
                                    static_cast<std::int64_t>(c) * p.v_chunk
                              : vbase;
        cp_async16(smem_addr(dv + swz(r, c, HEAD)), src, b >= 0 ? 16 : 0);
      }
    }
  };

  // ---- prologue: ids of the first STAGES tiles, the query tile, tiles 0 .. STAGES-2
  // The ids of tile it + STAGES are loaded into registers during tile it and stored at its
  // end, so the copies never wait on a block-table round trip.
  int nblk = -1, noff = 0;
  if (tid < TOK) {
#pragma unroll
    for (int st = 0; st < STAGES; ++st) {
      int b, o;
      fetch_id(st, &b, &o);
      sBlk[st * TOK + tid] = b;
      sOff[st * TOK + tid] = o;
    }
    fetch_id(STAGES, &nblk, &noff);
  }
#pragma unroll
  for (int k = 0; k < kPrefillRowsPerCta * CH / NT; ++k) {
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
    cp_async16(smem_addr(sQ + swz(r, c, HEAD)), src, ok ? 16 : 0);
  }
  cp_async_commit();
  __syncthreads();  // ids visible
#pragma unroll
  for (int st = 0; st < STAGES - 1; ++st) {
    if (st < ntiles) issue_tile(st, st);
    cp_async_commit();
  }
  cp_async_wait<STAGES - 1>();  // the query group
  __syncthreads();

  unsigned qf[KSTEPS][4];
  {
    const int r = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks)
      ldmatrix_x4(qf[ks], smem_addr(sQ + swz(r, ks * 2 + (lane >> 4), HEAD)));
  }

  // ---- this thread's two rows (fragment rows lane/4 and lane/4 + 8 of the warp's 16)
  const bool warp_active = warp * 16 < nvalid;
  const int w_last = min(warp * 16 + 15, nvalid - 1);
  const int warp_qlo = pos_first + (rem + warp * 16) / G;  // positions of the warp's rows
  const int warp_qhi = pos_first + (rem + w_last) / G;
  int qpos[2];
  float slope[2];
  float m_run[2], l_run[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = warp * 16 + (lane >> 2) + h * 8;
    const bool ok = r < nvalid;
    const int rr = rem + r;
    const int head = g * G + rr % G;
    // Rows past the sequence see nothing (all masked on edge tiles) and are never written.
    qpos[h] = ok ? pos_first + rr / G : -1;
    slope[h] = (ok && p.alibi != nullptr)
                   ? p.alibi[static_cast<std::int64_t>(head) * p.alibi_stride] * kLog2e
                   : 0.f;
    // A sink is one more logit in the denominator: start the running state with it (its
    // exp counted once per row, by the quad's first thread).
    const bool sink = ok && p.sinks != nullptr;
    m_run[h] = sink ? p.sinks[static_cast<std::int64_t>(head) * p.sinks_stride] * kLog2e : -INFINITY;
    // A sink of -inf is no sink: its term e^(sink - max) is 0, not 1 (a row whose logits are
    // all -inf must stay 0/0 = NaN, as in the oracle).
    l_run[h] = (sink && m_run[h] != -INFINITY && (lane & 3) == 0) ? 1.f : 0.f;
  }
  float o[DT][4];
#pragma unroll
  for (int i = 0; i < DT; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;

  // One 64-key tile for the warp's 16 rows; MASK applies the causal / window / range mask per
  // element (tiles that cut an edge), without it every key is visible to every row. Only the
  // 16-key steps [kk_lo, kk_hi) hold a key some row of the warp sees (edge tiles): the others
  // keep S = 0 (masked below) and add nothing to O, so their MMAs are skipped.
  auto compute_tile = [&](const T* K, const T* V, int t0, int kk_lo, int kk_hi, auto mask_tag) {
    constexpr bool MASK = decltype(mask_tag)::value;
    float sc[8][4];
#pragma unroll
    for (int n = 0; n < 8; ++n) sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.f;
    {
      // B fragments of key n-tiles 2np, 2np+1: matrices (keys 0-7 | 8-15) x (dims 0-7 | 8-15).
      const int r = (lane & 7) + (lane >> 4) * 8;
      const int cb = (lane >> 3) & 1;
#pragma unroll
      for (int ks = 0; ks < KSTEPS; ++ks) {
#pragma unroll
        for (int np = 0; np < 4; ++np) {
          if (MASK && (np < kk_lo || np >= kk_hi)) continue;  // warp-uniform
          unsigned b[4];
          ldmatrix_x4(b, smem_addr(K + swz(np * 16 + r, ks * 2 + cb, HEAD)));
          mma16816<T>(sc[2 * np], qf[ks], b[0], b[1]);
          mma16816<T>(sc[2 * np + 1], qf[ks], b[2], b[3]);
        }
      }
    }
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e >> 1;
        const int j = t0 + n * 8 + 2 * (lane & 3) + (e & 1);
        float z = p.softcap > 0.f ? p.cap_log2 * tanhf(sc[n][e] * p.cap_arg)
                                  : sc[n][e] * p.scale_log2;
        if (p.alibi != nullptr) z += slope[h] * static_cast<float>(j - qpos[h]);
        if (MASK && !(j <= qpos[h] && (p.window <= 0 || qpos[h] - j < p.window))) z = -INFINITY;
        sc[n][e] = z;
        mx[h] = fmaxf(mx[h], z);
      }
    }
    float corr[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
      const float m_new = fmaxf(m_run[h], mx[h]);
      // Nothing seen yet: exp2(-inf - -inf) would be NaN.
      corr[h] = m_new == -INFINITY ? 1.f : exp2f(m_run[h] - m_new);
      m_run[h] = m_new;
    }
    float ps[2] = {0.f, 0.f};
    const float base[2] = {softmax_base(m_run[0]), softmax_base(m_run[1])};
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e >> 1;
        const float pv = exp2f(sc[n][e] - base[h]);
        sc[n][e] = pv;
        ps[h] += pv;
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) l_run[h] = l_run[h] * corr[h] + ps[h];
#pragma unroll
    for (int i = 0; i < DT; ++i) {
      o[i][0] *= corr[0];
      o[i][1] *= corr[0];
      o[i][2] *= corr[1];
      o[i][3] *= corr[1];
    }
#pragma unroll
    for (int kk = 0; kk < TOK / 16; ++kk) {
      if (MASK && (kk < kk_lo || kk >= kk_hi)) continue;  // warp-uniform
      unsigned a[4];
      a[0] = pack2<T>(sc[2 * kk][0], sc[2 * kk][1]);
      a[1] = pack2<T>(sc[2 * kk][2], sc[2 * kk][3]);
      a[2] = pack2<T>(sc[2 * kk + 1][0], sc[2 * kk + 1][1]);
      a[3] = pack2<T>(sc[2 * kk + 1][2], sc[2 * kk + 1][3]);
      const int m = lane >> 3;
#pragma unroll
      for (int dt = 0; dt < HEAD / 16; ++dt) {
        unsigned b[4];
        if constexpr (SPLIT) {
          // V tile rows are head dims: matrices (dims 0-7 | 8-15) x (keys 0-7 | 8-15).
          const int d = dt * 16 + (lane & 7) + (m >> 1) * 8;
          ldmatrix_x4(b, smem_addr(V + swz(d, kk * 2 + (m & 1), TOK)));
        } else {
          const int r = kk * 16 + (lane & 7) + (m & 1) * 8;
          ldmatrix_x4_trans(b, smem_addr(V + swz(r, dt * 2 + (m >> 1), HEAD)));
        }
        mma16816<T>(o[dt * 2], a, b[0], b[1]);
        mma16816<T>(o[dt * 2 + 1], a, b[2], b[3]);
      }
    }
  };

  for (int it = 0; it < ntiles; ++it) {
    cp_async_wait<STAGES - 2>();  // tile it has landed (this thread's copies)
    __syncthreads();              // ... everyone's; and stage (it - 1) % STAGES is free
    {
      const int nt = it + STAGES - 1;
      if (nt < ntiles) issue_tile(nt, nt % STAGES);
      cp_async_commit();
    }
    const int stage = it % STAGES;
    const int t0 = start + it * TOK;
    if (warp_active) {
      // Warp-uniform: skip a tile none of the warp's rows sees; mask only edge tiles.
      const std::int64_t t_last = std::int64_t{t0} + TOK - 1;
      const bool has_window = p.window > 0;
      const bool skip = t0 > warp_qhi ||
                        (has_window && t_last < std::int64_t{warp_qlo} - p.window + 1);
      const bool full = t_last <= warp_qlo &&
                        (!has_window || std::int64_t{t0} >= std::int64_t{warp_qhi} - p.window + 1);
      if (!skip) {
        const T* K = sK + stage * TILE;
        const T* V = sV + stage * TILE;
        if (full) {
          compute_tile(K, V, t0, 0, TOK / 16, std::false_type{});
        } else {
          // Key steps past the warp's last row, or before its first row's window, are empty.
          const std::int64_t first_seen = has_window ? std::int64_t{warp_qlo} - p.window + 1 : 0;
          const int kk_lo = first_seen > t0 ? static_cast<int>((first_seen - t0) / 16) : 0;
          const int span = warp_qhi - t0;  // >= 0: the tile is not skipped
          const int kk_hi = span >= TOK - 1 ? TOK / 16 : span / 16 + 1;
          compute_tile(K, V, t0, kk_lo, kk_hi, std::true_type{});
        }
      }
    }
    // Ids of tile it + STAGES go into this stage's slots (read when that tile is issued,
    // after the next barrier); then start loading the ids of tile it + STAGES + 1.
    if (tid < TOK) {
      sBlk[stage * TOK + tid] = nblk;
      sOff[stage * TOK + tid] = noff;
      fetch_id(it + STAGES + 1, &nblk, &noff);
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every stage free: K[0] takes the output rows
  if (!warp_active) return;

  // ---- epilogue: normalise, stage the warp's 16 rows in K[0] (conflict-free: row lane/4
  // lands in chunk dt ^ (row & 7)), then 16-byte stores of whole rows.
  float inv[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
    // NaN (NaN scores) passes through; l = 0 (every logit -inf, no sink) is 0/0: NaN, as in
    // the oracle (every written row has keys: its own position at least).
    inv[h] = l_run[h] != 0.f ? 1.f / l_run[h] : NAN;
  }
  T* so = sK + warp * 16 * HEAD;
  {
    const int r = lane >> 2, cw = 2 * (lane & 3);
#pragma unroll
    for (int dt = 0; dt < DT; ++dt) {
      *reinterpret_cast<unsigned*>(so + swz(r, dt, HEAD) + cw) =
          pack2<T>(o[dt][0] * inv[0], o[dt][1] * inv[0]);
      *reinterpret_cast<unsigned*>(so + swz(r + 8, dt, HEAD) + cw) =
          pack2<T>(o[dt][2] * inv[1], o[dt][3] * inv[1]);
    }
  }
  if (p.lse != nullptr && (lane & 3) == 0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = warp * 16 + (lane >> 2) + h * 8;
      if (r < nvalid) {
        const int rr = rem + r;
        const std::int64_t tok = q0 + tb + rr / G;
        const std::int64_t head = g * G + rr % G;
        p.lse[tok * p.l_tok + head * p.l_head] =
            l_run[h] != 0.f ? (softmax_base(m_run[h]) + log2f(l_run[h])) * kLn2 : NAN;
      }
    }
  }
  __syncwarp();
#pragma unroll
  for (int k = 0; k < 16 * CH / 32; ++k) {
    const int i = lane + k * 32;
    const int r = i / CH, c = i % CH;
    const int rw = warp * 16 + r;
    if (rw < nvalid) {
      const int rr = rem + rw;
      const std::int64_t tok = q0 + tb + rr / G;
      const std::int64_t head = g * G + rr % G;
      T* dst = static_cast<T*>(p.out) + tok * p.o_tok + head * p.o_head + c * 8;
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(so + swz(r, c, HEAD));
    }
  }
}

template <class T, int HEAD, bool SPLIT, int STAGES>
Status launch(const PrefillParams& p, std::int64_t row_tiles, int num_kv_heads,
              cudaStream_t stream) {
  auto kernel = prefill_mma_kernel<T, HEAD, SPLIT, STAGES>;
  const int smem = static_cast<int>(prefill_mma_smem_bytes(HEAD, STAGES));
  // Per function and device, not a stream operation: legal during graph capture.
  PA_CUDA_RETURN(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
                 "prefill_mma: cudaFuncSetAttribute");
  const dim3 grid(static_cast<unsigned>(row_tiles), static_cast<unsigned>(num_kv_heads));
  kernel<<<grid, kPrefillThreads, smem, stream>>>(p);
  PA_CUDA_RETURN(cudaGetLastError(), "prefill_mma: kernel launch");
  return Status::Ok();
}

template <class T, int HEAD>
Status launch_layout(const PrefillParams& p, KVLayout layout, int stages, std::int64_t row_tiles,
                     int num_kv_heads, cudaStream_t stream) {
  constexpr int PREF = HEAD <= 64 ? 4 : 3;
  static_assert(PREF == (HEAD <= 64 ? 4 : 3), "keep in sync with prefill_mma_preferred_stages");
  const bool split = layout == KVLayout::kSplit;
  if (stages == PREF)
    return split ? launch<T, HEAD, true, PREF>(p, row_tiles, num_kv_heads, stream)
                 : launch<T, HEAD, false, PREF>(p, row_tiles, num_kv_heads, stream);
  if (stages == 2)
    return split ? launch<T, HEAD, true, 2>(p, row_tiles, num_kv_heads, stream)
                 : launch<T, HEAD, false, 2>(p, row_tiles, num_kv_heads, stream);
  return Status(StatusCode::kInternal,
                "prefill_mma: no kernel for " + std::to_string(stages) + " stages");
}

}  // namespace

Status prefill_mma_run(const AttentionArgs& args, int block_size, int stages,
                       std::int64_t row_tiles, int min_query_len, void* workspace, Stream stream) {
  const int num_seqs = static_cast<int>(args.seq_lens.shape[0]);
  if (row_tiles <= 0 || num_seqs == 0) return Status::Ok();
  if (row_tiles > INT_MAX)
    return Status(StatusCode::kUnsupported, "prefill_mma: " + std::to_string(row_tiles) +
                                                " row tiles exceed the grid limit");
  const KVCache& c = args.cache;
  PrefillParams p{};
  fill_attention_params(p, args);
  const MmaCacheStrides cs = mma_cache_strides(c);
  p.k_blk = cs.k_blk; p.k_head = cs.k_head; p.k_tok = cs.k_tok; p.k_chunk = cs.k_chunk;
  p.v_blk = cs.v_blk; p.v_head = cs.v_head; p.v_tok = cs.v_tok; p.v_chunk = cs.v_chunk;
  p.v_dim = cs.v_dim;
  p.bt_width = args.block_table.shape[1];
  p.num_blocks = c.key.shape[0];
  const int num_heads = static_cast<int>(args.query.shape[1]);
  const int head = static_cast<int>(args.query.shape[2]);
  const int num_kv_heads = cs.num_kv_heads;
  p.num_seqs = num_seqs;
  p.gqa = num_heads / num_kv_heads;
  p.block_size = block_size;
  const float scale = args.params.scale;
  p.scale_log2 = scale * kLog2e;
  if (p.softcap > 0.f) {
    p.cap_arg = scale / p.softcap;
    p.cap_log2 = p.softcap * kLog2e;
  }
  int* tile_start = static_cast<int*>(workspace);
  p.tile_start = tile_start;

  DeviceGuard guard(args.query.device.index);
  PA_CUDA_RETURN(guard.status(), "prefill_mma: cudaSetDevice");
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  PAGEDATTN_RETURN_IF_ERROR(launch_tile_prefix(p.qsl, p.qsl_stride, num_seqs, kPrefillRowsPerCta,
                                               p.gqa, min_query_len, INT_MAX, tile_start, st));
  const bool bf16 = args.query.dtype == DType::kBFloat16;
  if (head == 64)
    return bf16 ? launch_layout<__nv_bfloat16, 64>(p, c.layout, stages, row_tiles, num_kv_heads, st)
                : launch_layout<__half, 64>(p, c.layout, stages, row_tiles, num_kv_heads, st);
  if (head == 128)
    return bf16 ? launch_layout<__nv_bfloat16, 128>(p, c.layout, stages, row_tiles, num_kv_heads, st)
                : launch_layout<__half, 128>(p, c.layout, stages, row_tiles, num_kv_heads, st);
  return Status(StatusCode::kInternal, "prefill_mma: head_size " + std::to_string(head));
}

}  // namespace pagedattn::cuda
