// The CUDA decode fast path: see decode_mma.h for the design.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <mutex>

#include "src/cuda/cuda_common.cuh"
#include "src/cuda/decode_mma.h"
#include "src/cuda/fast_div.h"
#include "src/cuda/mma_common.cuh"

namespace pagedattn::cuda {

namespace {

using namespace mma;

constexpr int kMaxDecodeSplits = 512;
constexpr int kMinChunkTokens = 64;
/// CTA-slot "waves" the split choice aims at. Measured on the H200 (W1-W6, 1/2/4/8 waves):
/// two waves is best: longer CTAs pay their pipeline fill and epilogue less often, and two
/// waves still let the hardware scheduler even out unequal lengths.
constexpr int kWaves = 2;

struct DecodeParams {
  const void* q;
  std::int64_t q_tok, q_head;
  void* out;
  std::int64_t o_tok, o_head;
  float* lse;
  std::int64_t l_tok, l_head;
  const void* k;
  const void* v;
  // key element (block b, kv head g, token t, 8-element chunk c) at
  //   b*k_blk + g*k_head + t*k_tok + c*k_chunk (+ 0..7)
  std::int64_t k_blk, k_head, k_tok, k_chunk;
  // value, nhd/hnd: the same form; split: b*v_blk + g*v_head + d*v_dim + t
  std::int64_t v_blk, v_head, v_tok, v_chunk, v_dim;
  const int* block_table;
  std::int64_t bt_seq, bt_blk;
  const int* seq_lens;
  std::int64_t sl_stride;
  const int* qsl;
  std::int64_t qsl_stride;
  int num_heads, gqa, block_size;
  float scale, softcap;
  int window;
  const float* alibi;
  std::int64_t alibi_stride;
  const float* sinks;
  std::int64_t sinks_stride;
  int chunk, max_splits;
  // 32-bit copies of the strides the fast path multiplies per tile (decode_mma_aligned_strides
  // guarantees they fit) and the block-size divider.
  int k_blk32, k_tok32, k_chunk32, v_blk32, v_tok32, v_dim32;
  FastDiv bs_div;
  int num_seqs;
  int work_list;  // 1: CTAs stride over a numbered list of (sequence, split) items
  float* part_o;
  float* part_lse;
};

/// Split range of sequence `s`: keys [valid_lo, end) of split `split`; false if the split or
/// the sequence has no work. Splits start on 64-token boundaries of absolute positions.
__device__ __forceinline__ bool split_range(const DecodeParams& p, int len, int split,
                                            int* start, int* valid_lo, int* end, int* nsplit) {
  const int lo = p.window > 0 ? max(0, len - p.window) : 0;
  const int lo_al = lo & ~(kDecodeTileTokens - 1);
  *nsplit = (len - lo_al + p.chunk - 1) / p.chunk;
  if (split >= *nsplit) return false;
  *start = lo_al + split * p.chunk;
  *end = min(len, *start + p.chunk);
  *valid_lo = max(*start, lo);
  return *valid_lo < *end;
}

/// Splits of sequence `s` (0 when it is not a decode row or has no keys); the same cut as
/// split_range.
__device__ __forceinline__ int seq_splits(const DecodeParams& p, int s) {
  const int q0 = p.qsl[s * p.qsl_stride];
  if (p.qsl[(s + 1) * p.qsl_stride] - q0 != 1) return 0;
  const int len = p.seq_lens[s * p.sl_stride];
  if (len <= 0) return 0;
  const int lo = p.window > 0 ? max(0, len - p.window) : 0;
  return (len - (lo & ~(kDecodeTileTokens - 1)) + p.chunk - 1) / p.chunk;
}

/// Work-list mode handles up to 32 lanes x kListPerLane sequences.
constexpr int kListPerLane = 8;

// Orientation: the MMAs compute S^T = K Q^T and O^T += V^T P^T, so the 16 MMA rows are 16
// tokens and the 8 MMA columns are query heads of the GQA group (NT = 1 for groups of up to 8,
// 2 for up to 16). Against "heads in the 16 rows" this halves the MMAs, exponentials and
// accumulator registers of a typical group of 4-8 heads. P^T reaches the second MMA through
// movmatrix (an 8x8 transpose in registers) instead of shared memory.
template <class T, int HEAD, bool SPLIT, int NT, int STAGES>
__global__ void __launch_bounds__(kDecodeThreads)
    decode_mma_kernel(const DecodeParams p) {
  constexpr int TOK = kDecodeTileTokens;
  constexpr int CH = HEAD / 8;  // 16-byte chunks per head row
  constexpr int TILE = TOK * HEAD;
  constexpr int KSTEPS = HEAD / 16;
  constexpr int DT = HEAD / 16;  // 16-dim row tiles of O^T
  constexpr int NH = 8 * NT;     // query-head columns
  constexpr int SO_PITCH = HEAD + 4;  // fp32 row pitch of the warp-merge buffer (no conflicts)
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ int s_work[2];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sK = sQ + NH * HEAD;
  T* sV = sK + STAGES * TILE;

  const int g = blockIdx.y;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int bs = p.block_size;
  const T* kbase = static_cast<const T*>(p.k) + static_cast<std::int64_t>(g) * p.k_head;
  const T* vbase = static_cast<const T*>(p.v) + static_cast<std::int64_t>(g) * p.v_head;
  // Shared-memory tile layouts. nhd/hnd: token rows of HEAD elements, 16-byte chunks
  // XOR-swizzled. split: the global layout's contiguous runs stay contiguous, so that every 8
  // lanes of a cp.async fill one 128-byte line (a transposing copy costs 4x the shared-memory
  // wavefronts): keys [chunk][token][8] (8 consecutive tokens of one chunk = the 128 bytes an
  // ldmatrix phase reads), values [warp slice][dim][16 tokens] with the two 8-token halves
  // swapped on dims with bit 2 set (8 consecutive dims of one half fall in 8 bank groups).
  auto k_at = [](int r, int c) { return SPLIT ? (c * TOK + r) * 8 : swz(r, c, HEAD); };
  auto v_split_at = [](int w, int d, int h) { return (w * HEAD + d) * 16 + ((h ^ ((d >> 2) & 1)) << 3); };

  // Work-list mode (skewed batches): the (sequence, split) items of all sequences are numbered
  // in order and the CTAs of one KV head stride over them, so no CTA is launched for a split a
  // short sequence does not have. Warp 0 keeps each lane's sequences' split counts.
  int cnt[kListPerLane];
  int lane_first = 0, lane_items = 0, total_items = 0, per_lane = 0;
  if (p.work_list && warp == 0) {
    per_lane = (p.num_seqs + 31) >> 5;
#pragma unroll
    for (int i = 0; i < kListPerLane; ++i) {
      const int s = lane * per_lane + i;
      cnt[i] = (i < per_lane && s < p.num_seqs) ? seq_splits(p, s) : 0;
      lane_items += cnt[i];
    }
    int x = lane_items;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, x, o);
      if (lane >= o) x += y;
    }
    lane_first = x - lane_items;
    total_items = __shfl_sync(0xffffffffu, x, 31);
  }

  for (int item = blockIdx.x;; item += gridDim.x) {
    int s, split;
    if (p.work_list) {
      if (warp == 0) {
        if (item >= lane_first && item < lane_first + lane_items) {
          int r = item - lane_first, found = -1, fsplit = 0;
#pragma unroll
          for (int i = 0; i < kListPerLane; ++i) {
            if (found < 0 && r < cnt[i]) {
              found = lane * per_lane + i;
              fsplit = r;
            }
            r -= cnt[i];
          }
          s_work[0] = found;
          s_work[1] = fsplit;
        }
        if (lane == 0 && item >= total_items) s_work[0] = -1;
      }
      __syncthreads();
      s = s_work[0];
      split = s_work[1];
      if (s < 0) break;
    } else {
      if (item != static_cast<int>(blockIdx.x)) break;  // one item per CTA
      s = blockIdx.z;
      split = blockIdx.x;
    }
    const int q0 = p.qsl[s * p.qsl_stride];
    const int len = p.seq_lens[s * p.sl_stride];
    int start, valid_lo, end, nsplit;
    if (p.qsl[(s + 1) * p.qsl_stride] - q0 != 1 ||
        !split_range(p, len, split, &start, &valid_lo, &end, &nsplit)) {
      __syncthreads();  // s_work is rewritten for the next item
      continue;
    }
    const int q_pos = len - 1;
    const int* bt = p.block_table + static_cast<std::int64_t>(s) * p.bt_seq;

    // Query rows of the GQA group (rows >= gqa are zero and never written back).
    for (int i = tid; i < NH * CH; i += kDecodeThreads) {
      const int r = i / CH, c = i % CH;
      const bool ok = r < p.gqa;
      const T* src = static_cast<const T*>(p.q);
      if (ok) src += static_cast<std::int64_t>(q0) * p.q_tok +
                     static_cast<std::int64_t>(g * p.gqa + r) * p.q_head + c * 8;
      cp_async16(smem_addr(sQ + swz(r, c, HEAD)), src, ok ? 16 : 0);
    }
    cp_async_commit();

    // Each thread owns one key row of every tile (nhd/hnd: half of token tid/2's head row;
    // split: token tid%64), so the block-table entry it needs for tile n+1 is fetched into a
    // register while tile n computes: the copies never wait on a block-table load. Addresses
    // are one 32x32->64-bit multiply-add per row and tile (strides fit in 32 bits, checked on
    // the host) plus immediate offsets per 16-byte copy: the copy side must stay a small
    // fraction of the instructions per byte.
    // Every warp copies exactly the 16 token rows it computes on (tokens warp*16 .. +15 of each
    // tile), so it waits for its own copies only: no CTA barrier per tile, and a slow warp
    // never stalls the others. Each lane's rows of a tile are fixed by its lane index, so the
    // block-table entries it needs for tile n+1 are fetched into registers while tile n
    // computes. Addresses are one 32x32->64-bit multiply-add per row and tile (strides fit in
    // 32 bits, checked on the host) plus immediate offsets per 16-byte copy.
    //   nhd/hnd: 8 lanes per token row (each copy instruction moves whole 128-byte lines),
    //            rows lane/8 + 4i;
    //   split:   keys: lane%16 = token, lane/16 + 2k = 16-byte chunk (16 tokens of one chunk
    //            are contiguous); values: lane%2 = 8-token chunk, lane/2 + 16k = head dim.
    constexpr int NR = SPLIT ? 1 : 4;  // key rows per lane
    int kid[NR], koff[NR];   // physical block (-1 = masked) and in-block offset of each row
    int vid = -1, voff = 0;  // split values: the lane's 8-token chunk
    const std::int64_t bt_blk = p.bt_blk;
    auto fetch_ids = [&](int tile) {
      const int tw0 = start + tile * TOK + warp * 16;
#pragma unroll
      for (int i = 0; i < NR; ++i) {
        const int t = tw0 + (SPLIT ? (lane & 15) : (lane >> 3) + 4 * i);
        const bool ok = t >= valid_lo && t < end;
        const int q = static_cast<int>(p.bs_div.div(static_cast<unsigned>(t)));
        kid[i] = ok ? bt[q * bt_blk] : -1;
        koff[i] = t - q * bs;
      }
      if constexpr (SPLIT) {
        const int tt = tw0 + (lane & 1) * 8;
        const bool any = tt + 8 > valid_lo && tt < end;
        const int qv = static_cast<int>(p.bs_div.div(static_cast<unsigned>(tt)));
        vid = any ? bt[qv * bt_blk] : -1;
        voff = tt - qv * bs;
      }
    };
    auto issue_tile = [&](int tile, int stage) {
      T* dk = sK + stage * TILE;
      T* dv = sV + stage * TILE;
      if constexpr (!SPLIT) {
        const int q = lane & 7;
#pragma unroll
        for (int i = 0; i < NR; ++i) {
          const int r = warp * 16 + (lane >> 3) + 4 * i;
          const bool ok = kid[i] >= 0;
          const T* ks = kbase + (ok ? static_cast<std::int64_t>(kid[i]) * p.k_blk32 + koff[i] * p.k_tok32 : 0) + q * 8;
          const T* vs = vbase + (ok ? static_cast<std::int64_t>(kid[i]) * p.v_blk32 + koff[i] * p.v_tok32 : 0) + q * 8;
          const int bytes = ok ? 16 : 0;
#pragma unroll
          for (int j = 0; j < CH / 8; ++j) {
            cp_async16(smem_addr(dk + swz(r, q + j * 8, HEAD)), ks + j * 64, bytes);
            cp_async16(smem_addr(dv + swz(r, q + j * 8, HEAD)), vs + j * 64, bytes);
          }
        }
      } else {
        const int r = warp * 16 + (lane & 15);
        const int c0 = lane >> 4;
        const bool ok = kid[0] >= 0;
        const T* ks = kbase + (ok ? static_cast<std::int64_t>(kid[0]) * p.k_blk32 + koff[0] * p.k_tok32 : 0) +
                      static_cast<std::int64_t>(c0) * p.k_chunk32;
        const std::int64_t kstep = ok ? std::int64_t{2} * p.k_chunk32 : 0;
#pragma unroll
        for (int k = 0; k < CH / 2; ++k) {
          cp_async16(smem_addr(dk + k_at(r, c0 + 2 * k)), ks, ok ? 16 : 0);
          ks += kstep;
        }
        // Value rows are head dims with tokens contiguous: a 16-byte chunk = 8 tokens of one
        // dim, inside one block because block_size % 8 == 0. Bytes at or past seq_len are
        // zero-filled (the tail of the last block may hold anything, NaN included).
        const int j = lane & 1;
        const int tt = start + tile * TOK + warp * 16 + j * 8;
        const int bytes = vid >= 0 ? 2 * min(8, len - tt) : 0;
        const int d0 = lane >> 1;
        const T* vs = vbase + (vid >= 0 ? static_cast<std::int64_t>(vid) * p.v_blk32 +
                                              static_cast<std::int64_t>(d0) * p.v_dim32 + voff
                                        : 0);
        const std::int64_t vstep = vid >= 0 ? std::int64_t{16} * p.v_dim32 : 0;
#pragma unroll
        for (int k = 0; k < HEAD / 16; ++k) {
          cp_async16(smem_addr(dv + v_split_at(warp, d0 + 16 * k, j)), vs, bytes);
          vs += vstep;
        }
      }
    };

    const int ntiles = (end - start + TOK - 1) / TOK;
#pragma unroll
    for (int st = 0; st < STAGES - 1; ++st) {
      fetch_ids(st);
      issue_tile(st, st);
      cp_async_commit();
    }
    fetch_ids(STAGES - 1);
    cp_async_wait<STAGES - 1>();  // the query group
    __syncthreads();

    // B fragments of Q^T (k = head dims, n = heads): matrix m of an x4 load is dims
    // [8(4j + m), +8) of heads nt*8 + 0..7, i.e. (b0, b1) of k-steps 2j and 2j + 1.
    unsigned qf[NT][KSTEPS / 2][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int j = 0; j < KSTEPS / 2; ++j)
        ldmatrix_x4(qf[nt][j], smem_addr(sQ + swz(nt * 8 + (lane & 7), j * 4 + (lane >> 3), HEAD)));

    // Columns of this thread in the fragments: heads nt*8 + 2*(lane%4) + b.
    float slope[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int b = 0; b < 2; ++b) {
        const int r = nt * 8 + 2 * (lane & 3) + b;
        slope[nt][b] = (p.alibi != nullptr && r < p.gqa)
                           ? p.alibi[static_cast<std::int64_t>(g * p.gqa + r) * p.alibi_stride]
                           : 0.f;
      }
    float m_run[NT][2], l_run[NT][2];
    float o[DT][NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      m_run[nt][0] = m_run[nt][1] = -INFINITY;
      l_run[nt][0] = l_run[nt][1] = 0.f;
#pragma unroll
      for (int i = 0; i < DT; ++i) o[i][nt][0] = o[i][nt][1] = o[i][nt][2] = o[i][nt][3] = 0.f;
    }

    for (int it = 0; it < ntiles; ++it) {
      cp_async_wait<STAGES - 2>();
      __syncwarp();  // the warp's own rows of tile `it` have landed; its reads of tile it-1 are done
      {
        // Tiles past the end have every row masked: their copies read nothing.
        const int nt = it + STAGES - 1;
        if (nt < ntiles) issue_tile(nt, nt % STAGES);
        cp_async_commit();
        if (nt + 1 < ntiles) fetch_ids(nt + 1);
      }
      const int stage = it % STAGES;
      const T* K = sK + stage * TILE;
      const T* V = sV + stage * TILE;
      const int tw = start + it * TOK + warp * 16;  // first token of this warp's 16
      if (tw + 16 <= valid_lo || tw >= end) continue;

      // S^T (16 tokens x NH heads); two accumulators halve the dependent MMA chain.
      float sc[NT][4], sc2[NT][4];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) sc[nt][e] = sc2[nt][e] = 0.f;
      {
        const int r = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
        for (int ks = 0; ks < KSTEPS; ++ks) {
          unsigned a[4];
          ldmatrix_x4(a, smem_addr(K + k_at(r, ks * 2 + (lane >> 4))));
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            const unsigned b0 = qf[nt][ks >> 1][(ks & 1) * 2];
            const unsigned b1 = qf[nt][ks >> 1][(ks & 1) * 2 + 1];
            if (ks & 1) mma16816<T>(sc2[nt], a, b0, b1);
            else mma16816<T>(sc[nt], a, b0, b1);
          }
        }
      }

      // Element e of a fragment: token tw + lane/4 + 8*(e/2), head column 2*(lane%4) + e%2.
      // Masking and ALiBi cost per-element instructions, so they run only where needed (the
      // branches are warp-uniform).
      const bool edge = tw < valid_lo || tw + 16 > end;
      float mx[NT][2];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        mx[nt][0] = mx[nt][1] = -INFINITY;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int b = e & 1;
          const int j = tw + (lane >> 2) + (e >> 1) * 8;
          float z = (sc[nt][e] + sc2[nt][e]) * p.scale;
          if (p.softcap > 0.f) z = p.softcap * tanhf(z / p.softcap);
          if (p.alibi != nullptr) z += slope[nt][b] * static_cast<float>(j - q_pos);
          if (edge && (j < valid_lo || j >= end)) z = -INFINITY;
          sc[nt][e] = z;
          mx[nt][b] = fmaxf(mx[nt][b], z);
        }
      }
      float corr[NT][2];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int b = 0; b < 2; ++b) {
          float m = mx[nt][b];
          m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 4));
          m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 8));
          m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 16));
          const float m_new = fmaxf(m_run[nt][b], m);
          // Guard the all-masked case: exp(-inf - -inf) would be NaN.
          corr[nt][b] = m_new == -INFINITY ? 1.f : __expf(m_run[nt][b] - m_new);
          m_run[nt][b] = m_new;
        }
      unsigned pb[NT][2];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        float pv[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float m = m_run[nt][e & 1];
          pv[e] = m == -INFINITY ? 0.f : __expf(sc[nt][e] - m);
        }
        l_run[nt][0] = l_run[nt][0] * corr[nt][0] + pv[0] + pv[2];
        l_run[nt][1] = l_run[nt][1] * corr[nt][1] + pv[1] + pv[3];
        // (tokens 0-7 | 8-15) x 8 heads, transposed into the B fragment (k = tokens).
        pb[nt][0] = movmatrix_trans(pack2<T>(pv[0], pv[1]));
        pb[nt][1] = movmatrix_trans(pack2<T>(pv[2], pv[3]));
      }
      // Once the running maxima settle (after a few tiles, typically) no accumulator needs
      // rescaling: skip the multiplies unless some head's maximum moved (warp-uniform test).
      bool moved = false;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) moved |= corr[nt][0] != 1.f || corr[nt][1] != 1.f;
      if (__any_sync(0xffffffffu, moved)) {
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
#pragma unroll
      for (int dt = 0; dt < DT; ++dt) {
        // A fragment of V^T (16 dims x 16 tokens).
        unsigned a[4];
        if constexpr (SPLIT) {
          const int d = dt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
          ldmatrix_x4(a, smem_addr(V + v_split_at(warp, d, lane >> 4)));
        } else {
          const int r = warp * 16 + (lane & 7) + ((lane >> 4) & 1) * 8;
          ldmatrix_x4_trans(a, smem_addr(V + swz(r, dt * 2 + ((lane >> 3) & 1), HEAD)));
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) mma16816<T>(o[dt][nt], a, pb[nt][0], pb[nt][1]);
      }
    }
    cp_async_wait<0>();
    __syncthreads();

    // Merge the four warps' states (fixed order: deterministic).
    float* red_m = reinterpret_cast<float*>(smem_raw);  // [4][NH]
    float* red_l = red_m + 4 * NH;                      // [4][NH]
    float* fin = red_l + 4 * NH;                        // [2][NH]: M, L per head
    float* so = fin + 2 * NH;                           // [4][NH][SO_PITCH]
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int b = 0; b < 2; ++b) {
        float l = l_run[nt][b];
        l += __shfl_xor_sync(0xffffffffu, l, 4);
        l += __shfl_xor_sync(0xffffffffu, l, 8);
        l += __shfl_xor_sync(0xffffffffu, l, 16);
        if (lane < 4) {
          const int h = nt * 8 + 2 * lane + b;
          red_m[warp * NH + h] = m_run[nt][b];
          red_l[warp * NH + h] = l;
        }
      }
    __syncthreads();
    float f[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int b = 0; b < 2; ++b) {
        const int h = nt * 8 + 2 * (lane & 3) + b;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < 4; ++w) M = fmaxf(M, red_m[w * NH + h]);
        f[nt][b] = m_run[nt][b] == -INFINITY ? 0.f : __expf(m_run[nt][b] - M);
        if (warp == 0 && lane < 4) {
          float L = 0.f;
#pragma unroll
          for (int w = 0; w < 4; ++w) {
            const float mw = red_m[w * NH + h];
            if (mw != -INFINITY) L += red_l[w * NH + h] * __expf(mw - M);
          }
          fin[h] = M;
          fin[NH + h] = L;
        }
      }
#pragma unroll
    for (int dt = 0; dt < DT; ++dt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int h = nt * 8 + 2 * (lane & 3) + (e & 1);
          const int d = dt * 16 + (lane >> 2) + (e >> 1) * 8;
          so[(warp * NH + h) * SO_PITCH + d] = o[dt][nt][e] * f[nt][e & 1];
        }
    __syncthreads();

    const bool single = nsplit == 1;
    const std::int64_t part_row =
        (static_cast<std::int64_t>(s) * p.max_splits + split) * p.num_heads;
    for (int i = tid; i < p.gqa * HEAD; i += kDecodeThreads) {
      const int r = i / HEAD, d = i % HEAD;
      const int h = g * p.gqa + r;
      float acc = 0.f;
#pragma unroll
      for (int w = 0; w < 4; ++w) acc += so[(w * NH + r) * SO_PITCH + d];
      float M = fin[r], L = fin[NH + r];
      if (single) {
        if (p.sinks != nullptr) {
          const float sk = p.sinks[static_cast<std::int64_t>(h) * p.sinks_stride];
          const float M2 = fmaxf(M, sk);
          acc *= __expf(M - M2);
          L = L * __expf(M - M2) + __expf(sk - M2);
          M = M2;
        }
        T* out = static_cast<T*>(p.out) + static_cast<std::int64_t>(q0) * p.o_tok +
                 static_cast<std::int64_t>(h) * p.o_head;
        out[d] = float_to_elem<T>(acc / L);
        if (d == 0 && p.lse != nullptr)
          p.lse[static_cast<std::int64_t>(q0) * p.l_tok + static_cast<std::int64_t>(h) * p.l_head] =
              M + __logf(L);
      } else {
        p.part_o[(part_row + h) * HEAD + d] = acc / L;
        if (d == 0) p.part_lse[part_row + h] = M + __logf(L);
      }
    }
    __syncthreads();  // the next item reuses shared memory and s_work
  }
}

/// Combine the splits of each (decode sequence, query head): a fixed-order log-sum-exp merge
/// (deterministic), adding the sink once. Warp 0 turns the split LSEs into weights in shared
/// memory with all loads of a lane in flight together; then each thread sums its head dim over
/// the splits (independent loads, unrolled), so the merge costs two memory round trips rather
/// than two per split.
template <class T, int HEAD>
__global__ void __launch_bounds__(HEAD) decode_merge_kernel(const DecodeParams p) {
  __shared__ float weight[kMaxDecodeSplits];
  __shared__ float total[2];
  const int h = blockIdx.x, s = blockIdx.y, d = threadIdx.x;
  const int q0 = p.qsl[s * p.qsl_stride];
  if (p.qsl[(s + 1) * p.qsl_stride] - q0 != 1) return;
  const int len = p.seq_lens[s * p.sl_stride];
  int start, valid_lo, end, nsplit;
  split_range(p, len, 0, &start, &valid_lo, &end, &nsplit);
  if (nsplit <= 1) return;  // the split kernel wrote the output itself
  const std::int64_t base = static_cast<std::int64_t>(s) * p.max_splits * p.num_heads + h;
  if (d < 32) {
    float M = -INFINITY;
    for (int i = d; i < nsplit; i += 32)
      M = fmaxf(M, p.part_lse[base + static_cast<std::int64_t>(i) * p.num_heads]);
    M = warp_max(M);
    float sk = -INFINITY;
    if (p.sinks != nullptr) {
      sk = p.sinks[static_cast<std::int64_t>(h) * p.sinks_stride];
      M = fmaxf(M, sk);
    }
    float den = 0.f;
    for (int i = d; i < nsplit; i += 32) {
      const float l = p.part_lse[base + static_cast<std::int64_t>(i) * p.num_heads];
      const float w = l == -INFINITY ? 0.f : __expf(l - M);
      weight[i] = w;
      den += w;
    }
    den = warp_sum(den);
    if (d == 0) {
      total[0] = M;
      total[1] = den + (sk == -INFINITY ? 0.f : __expf(sk - M));
    }
  }
  __syncthreads();
  float acc = 0.f;
#pragma unroll 8
  for (int i = 0; i < nsplit; ++i)
    acc += weight[i] * p.part_o[(base + static_cast<std::int64_t>(i) * p.num_heads) * HEAD + d];
  const float den = total[1];
  T* out = static_cast<T*>(p.out) + static_cast<std::int64_t>(q0) * p.o_tok +
           static_cast<std::int64_t>(h) * p.o_head;
  out[d] = float_to_elem<T>(acc / den);
  if (d == 0 && p.lse != nullptr)
    p.lse[static_cast<std::int64_t>(q0) * p.l_tok + static_cast<std::int64_t>(h) * p.l_head] =
        total[0] + __logf(den);
}

/// Launch geometry of one call.
struct DecodeGrid {
  int num_splits, num_kv_heads, num_seqs;
  int list_ctas;  // > 0: work-list mode with this many CTAs per KV head
};

template <class T, int HEAD, bool SPLIT, int NT>
Status launch(const DecodeParams& p, const DecodeGrid& gr, cudaStream_t stream) {
  constexpr int STAGES = HEAD <= 64 ? 4 : 3;
  static_assert(STAGES == (HEAD <= 64 ? 4 : 3), "keep in sync with decode_mma_stages");
  auto kernel = decode_mma_kernel<T, HEAD, SPLIT, NT, STAGES>;
  const int smem = static_cast<int>(decode_mma_smem_bytes(HEAD));
  // The attribute is per function and per device; setting it is not a stream operation, so
  // it is legal during graph capture, and cheap enough to repeat.
  PA_CUDA_RETURN(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
                 "decode_mma: cudaFuncSetAttribute");
  const dim3 grid = gr.list_ctas > 0 ? dim3(gr.list_ctas, gr.num_kv_heads, 1)
                                     : dim3(gr.num_splits, gr.num_kv_heads, gr.num_seqs);
  kernel<<<grid, kDecodeThreads, smem, stream>>>(p);
  PA_CUDA_RETURN(cudaGetLastError(), "decode_mma: kernel launch");
  if (gr.num_splits > 1) {
    decode_merge_kernel<T, HEAD><<<dim3(p.num_heads, gr.num_seqs), HEAD, 0, stream>>>(p);
    PA_CUDA_RETURN(cudaGetLastError(), "decode_mma: merge launch");
  }
  return Status::Ok();
}

template <class T, int HEAD>
Status launch_layout(const DecodeParams& p, KVLayout layout, const DecodeGrid& gr,
                     cudaStream_t stream) {
  const bool wide = p.gqa > 8;
  if (layout == KVLayout::kSplit)
    return wide ? launch<T, HEAD, true, 2>(p, gr, stream) : launch<T, HEAD, true, 1>(p, gr, stream);
  return wide ? launch<T, HEAD, false, 2>(p, gr, stream) : launch<T, HEAD, false, 1>(p, gr, stream);
}

bool aligned16(const void* ptr) { return (reinterpret_cast<std::uintptr_t>(ptr) & 15u) == 0; }

}  // namespace

bool decode_mma_supported(const ProblemDesc& pr, std::string* why_not) {
  if (pr.batch.num_prefill_seqs > 0) {
    if (why_not) *why_not = "the batch has prefill chunks";
    return false;
  }
  return decode_mma_rows_supported(pr, why_not);
}

bool decode_mma_rows_supported(const ProblemDesc& pr, std::string* why_not) {
  auto no = [&](const char* why) {
    if (why_not) *why_not = why;
    return false;
  };
  if (pr.device.type != DeviceType::kCUDA) return no("not a CUDA device");
  if (pr.batch.num_decode_seqs == 0) return no("the batch has no decode rows");
  if (pr.q_dtype != DType::kFloat16 && pr.q_dtype != DType::kBFloat16)
    return no("query dtype is not fp16/bf16");
  if (pr.cache_dtype != pr.q_dtype) return no("cache dtype differs from the query dtype");
  if (pr.head_size != 64 && pr.head_size != 128) return no("head_size is not 64 or 128");
  if (pr.gqa_ratio() > 16) return no("GQA ratio above 16");
  if (pr.layout == KVLayout::kSplit && pr.block_size % 8 != 0)
    return no("split layout with block_size % 8 != 0");
  if (pr.batch.num_seqs > 65535) return no("more than 65535 sequences");
  return true;
}

bool decode_mma_aligned_strides(const AttentionArgs& args) {
  const TensorView* views[] = {&args.query, &args.out, &args.cache.key, &args.cache.value};
  for (const TensorView* v : views) {
    for (int d = 0; d + 1 < v->ndim; ++d)
      if (v->shape[d] > 1 && v->strides[d] % 8 != 0) return false;
  }
  // The kernel multiplies cache strides in 32 bits (products are formed in 64 bits).
  for (const TensorView* v : {&args.cache.key, &args.cache.value})
    for (int d = 0; d < v->ndim; ++d)
      if (v->strides[d] < 0 || v->strides[d] > INT32_MAX) return false;
  return true;
}

bool decode_mma_aligned(const AttentionArgs& args) {
  const TensorView* views[] = {&args.query, &args.out, &args.cache.key, &args.cache.value};
  for (const TensorView* v : views)
    if (!aligned16(v->data)) return false;
  return decode_mma_aligned_strides(args);
}

int decode_mma_chunk(const ProblemDesc& pr, int num_units, std::int64_t max_smem_per_block,
                     int forced_splits, int* num_splits) {
  const std::int64_t smem = decode_mma_smem_bytes(pr.head_size);
  // CTAs per SM by shared memory (1 KB reserved per CTA by the hardware), at most 4.
  const std::int64_t per_sm =
      std::clamp<std::int64_t>((max_smem_per_block + 1024) / (smem + 1024), 1, 4);
  const std::int64_t slots = std::max<std::int64_t>(1, num_units) * per_sm;
  // Key range of the longest sequence as the kernel cuts it: [lo rounded down to 64, seq_len).
  std::int64_t longest = std::max(1, pr.batch.max_seq_len);
  std::int64_t total = std::max<std::int64_t>(1, pr.batch.total_kv_tokens);
  if (pr.sliding_window > 0) {
    longest = std::min<std::int64_t>(longest, pr.sliding_window + kDecodeTileTokens - 1);
    total = std::min<std::int64_t>(total, longest * std::max(1, pr.batch.num_decode_seqs));
  }
  auto round_up = [](std::int64_t v, std::int64_t m) { return (v + m - 1) / m * m; };
  std::int64_t chunk;
  if (forced_splits > 0) {
    chunk = round_up((longest + forced_splits - 1) / forced_splits, kDecodeTileTokens);
  } else {
    const std::int64_t target = std::max<std::int64_t>(
        kMinChunkTokens, total * pr.num_kv_heads / (slots * kWaves));
    const std::int64_t n = std::max<std::int64_t>(1, (longest + target / 2) / target);
    chunk = std::max<std::int64_t>(kMinChunkTokens,
                                   round_up((longest + n - 1) / n, kDecodeTileTokens));
  }
  chunk = std::max<std::int64_t>(
      chunk, round_up((longest + kMaxDecodeSplits - 1) / kMaxDecodeSplits, kDecodeTileTokens));
  chunk = std::min<std::int64_t>(chunk, round_up(longest, kDecodeTileTokens));
  chunk = std::max<std::int64_t>(chunk, kDecodeTileTokens);
  // The kernel cuts [lo rounded down to 64, seq_len) into ceil(range / chunk) splits; a window
  // start inside a tile adds at most one tile to the range, which `longest` already counts.
  *num_splits = static_cast<int>((longest + chunk - 1) / chunk);
  return static_cast<int>(chunk);
}

std::size_t decode_mma_workspace(int num_seqs, int num_splits, int num_heads, int head_size) {
  if (num_splits <= 1) return 0;
  const std::size_t rows = static_cast<std::size_t>(num_seqs) * num_splits * num_heads;
  const std::size_t lse_bytes = (rows * sizeof(float) + 255) / 256 * 256;
  return lse_bytes + rows * head_size * sizeof(float);
}

Status decode_mma_run(const AttentionArgs& args, int block_size, int chunk_tokens,
                      int num_splits, void* workspace, Stream stream) {
  const KVCache& c = args.cache;
  DecodeParams p{};
  p.q = args.query.data;
  p.q_tok = args.query.strides[0];
  p.q_head = args.query.strides[1];
  p.out = args.out.data;
  p.o_tok = args.out.strides[0];
  p.o_head = args.out.strides[1];
  if (args.lse.defined()) {
    p.lse = static_cast<float*>(args.lse.data);
    p.l_tok = args.lse.strides[0];
    p.l_head = args.lse.strides[1];
  }
  p.k = c.key.data;
  p.v = c.value.data;
  const std::int64_t* ks = c.key.strides;
  const std::int64_t* vs = c.value.strides;
  switch (c.layout) {
    case KVLayout::kSplit:  // key [b, g, d/x, t, x], value [b, g, d, t]
      p.k_blk = ks[0]; p.k_head = ks[1]; p.k_chunk = ks[2]; p.k_tok = ks[3];
      p.v_blk = vs[0]; p.v_head = vs[1]; p.v_dim = vs[2]; p.v_tok = 1; p.v_chunk = 0;
      break;
    case KVLayout::kNHD:  // [b, t, g, d]
      p.k_blk = ks[0]; p.k_tok = ks[1]; p.k_head = ks[2]; p.k_chunk = 8;
      p.v_blk = vs[0]; p.v_tok = vs[1]; p.v_head = vs[2]; p.v_chunk = 8;
      break;
    case KVLayout::kHND:  // [b, g, t, d]
      p.k_blk = ks[0]; p.k_head = ks[1]; p.k_tok = ks[2]; p.k_chunk = 8;
      p.v_blk = vs[0]; p.v_head = vs[1]; p.v_tok = vs[2]; p.v_chunk = 8;
      break;
  }
  p.k_blk32 = static_cast<int>(p.k_blk);
  p.k_tok32 = static_cast<int>(p.k_tok);
  p.k_chunk32 = static_cast<int>(p.k_chunk);
  p.v_blk32 = static_cast<int>(p.v_blk);
  p.v_tok32 = static_cast<int>(p.v_tok);
  p.v_dim32 = static_cast<int>(p.v_dim);
  p.bs_div = FastDiv(static_cast<std::uint32_t>(block_size));
  p.block_table = static_cast<const int*>(args.block_table.data);
  p.bt_seq = args.block_table.strides[0];
  p.bt_blk = args.block_table.strides[1];
  p.seq_lens = static_cast<const int*>(args.seq_lens.data);
  p.sl_stride = args.seq_lens.strides[0];
  p.qsl = static_cast<const int*>(args.query_start_loc.data);
  p.qsl_stride = args.query_start_loc.strides[0];
  const int num_heads = static_cast<int>(args.query.shape[1]);
  const int head = static_cast<int>(args.query.shape[2]);
  const int num_kv_heads = c.layout == KVLayout::kNHD ? static_cast<int>(c.key.shape[2])
                                                      : static_cast<int>(c.key.shape[1]);
  p.num_heads = num_heads;
  p.gqa = num_heads / num_kv_heads;
  p.block_size = block_size;
  p.scale = args.params.scale;
  p.softcap = args.params.softcap;
  p.window = args.params.sliding_window;
  if (args.params.alibi_slopes.defined()) {
    p.alibi = static_cast<const float*>(args.params.alibi_slopes.data);
    p.alibi_stride = args.params.alibi_slopes.strides[0];
  }
  if (args.params.sinks.defined()) {
    p.sinks = static_cast<const float*>(args.params.sinks.data);
    p.sinks_stride = args.params.sinks.strides[0];
  }
  p.chunk = chunk_tokens;
  p.max_splits = num_splits;
  const int num_seqs = static_cast<int>(args.seq_lens.shape[0]);
  if (num_splits > 1) {
    const std::size_t rows = static_cast<std::size_t>(num_seqs) * num_splits * num_heads;
    const std::size_t lse_bytes = (rows * sizeof(float) + 255) / 256 * 256;
    p.part_lse = static_cast<float*>(workspace);
    p.part_o = reinterpret_cast<float*>(static_cast<char*>(workspace) + lse_bytes);
  }
  if (num_seqs == 0) return Status::Ok();
  DeviceGuard guard(args.query.device.index);
  PA_CUDA_RETURN(guard.status(), "decode_mma: cudaSetDevice");
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  DecodeGrid gr{num_splits, num_kv_heads, num_seqs, 0};
  p.num_seqs = num_seqs;
  // Work-list mode when many splits meet few enough sequences: a grid of (splits x sequences)
  // would launch a CTA for every split a short sequence lacks (in a skewed batch, almost all
  // of them), and each costs a scheduling slot.
  if (num_splits >= 8 && num_seqs > 1 && num_seqs <= 32 * kListPerLane) {
    int sms = 0;
    PA_CUDA_RETURN(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount,
                                          args.query.device.index),
                   "decode_mma: cudaDeviceGetAttribute(SM count)");
    const std::int64_t items = static_cast<std::int64_t>(num_seqs) * num_splits;
    const std::int64_t ctas = (std::int64_t{sms} * 2 * kWaves + num_kv_heads - 1) / num_kv_heads;
    gr.list_ctas = static_cast<int>(std::max<std::int64_t>(1, std::min(items, ctas)));
    p.work_list = 1;
  }
  const bool bf16 = args.query.dtype == DType::kBFloat16;
  if (head == 64)
    return bf16 ? launch_layout<__nv_bfloat16, 64>(p, c.layout, gr, st)
                : launch_layout<__half, 64>(p, c.layout, gr, st);
  return bf16 ? launch_layout<__nv_bfloat16, 128>(p, c.layout, gr, st)
              : launch_layout<__half, 128>(p, c.layout, gr, st);
}

}  // namespace pagedattn::cuda
