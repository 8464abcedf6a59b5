// The pipelined kernel of the CUDA decode fast path (decode_mma.h has the design):
// decode_mma_kernel, a template over the query type, head size, layout, query-column tiles,
// stages, head pairing and cache kind. Included by decode_mma_launch.cuh only; its templates
// live in an unnamed namespace, so each launching TU (decode_mma.cu: 16-bit caches,
// decode_mma_fp8.cu: fp8 caches) compiles the instantiations it launches.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <type_traits>

#include "src/cuda/common/cuda_common.cuh"
#include "src/cuda/common/fast_div.h"
#include "src/cuda/common/mma_args.h"
#include "src/cuda/common/mma_common.cuh"
#include "src/cuda/decode/decode_common.cuh"
#include "src/cuda/decode/decode_mma.h"
#include "src/cuda/decode/decode_split.h"

namespace pagedattn::cuda {

namespace {


using namespace mma;
using namespace decode;

/// A token's place in the paged cache, (block index in the sequence, offset in the block),
/// moved one 64-token tile forward by additions: one division per sequence, not per tile.
struct TokenCursor {
  int t, blk, off;
  __device__ __forceinline__ void init(const DecodeParams& p, int tok) {
    t = tok;
    blk = static_cast<int>(p.bs_div.div(static_cast<unsigned>(tok)));
    off = tok - blk * p.block_size;
  }
  // p.step_q / step_r are those of STEP tokens (decode_mma_run: the kernel's tile).
  template <int STEP = kDecodeTileTokens>
  __device__ __forceinline__ void advance(const DecodeParams& p) {
    t += STEP;
    blk += p.step_q;
    off += p.step_r;
    if (off >= p.block_size) {
      off -= p.block_size;
      ++blk;
    }
  }
};

/// Work-list mode handles up to 32 lanes x kListPerLane sequences.
constexpr int kListPerLane = kWorkListMaxSeqs / 32;

// Orientation: the MMAs compute S^T = K Q^T and O^T += V^T P^T, so the 16 MMA rows are 16
// tokens and the 8 MMA columns are query heads of the GQA group (NT = 1 for groups of up to 8,
// 2 for up to 16). Against "heads in the 16 rows" this halves the MMAs, exponentials and
// accumulator registers of a typical group of 4-8 heads. P^T reaches the second MMA through
// movmatrix (an 8x8 transpose in registers) instead of shared memory.
// Two CTAs per SM (head 128) / four (head 64; three for 16 query columns): shared memory
// allows no more, so the register budget may grow to 255 / 128 (170) per thread (see
// decode_mma_reg_ctas); addresses are then kept in registers instead of being recomputed per
// tile. fp8 head 128 with 8 columns runs three in 4 stages (168 registers at most;
// decode_mma_bound_ctas, decode_mma_stages).
// PAIR (decode_mma_pairs_heads): HEAD is 128 and each "KV head" g of the grid is the pair of
// head-64 KV heads 2g, 2g + 1; p.gqa is twice the real group, columns r < p.gqa / 2 belong to
// KV head 2g (Q in dims 0-63) and the others to 2g + 1 (Q in dims 64-127). The output,
// partials and cluster shares have HO = 64 dims per query head.
// KV (fp8 caches, decode_mma_fp8 below): kKvE4M3 / kKvE5M2 with T = __half: the fp8 bytes are
// staged as they are (half the bytes of a 16-bit tile) and dequantised to fp16 (exact) after
// each ldmatrix; both MMAs run in fp16 with fp32 accumulation, a bf16 query (p.q_bf16) being
// turned into fp16 in shared memory with a power-of-two scale per query head (exact for every
// element within 2^29 of the head's largest) that the score multiplier undoes, together with
// k_scale; v_scale joins the final normalisation. ldmatrix moves b16 elements, i.e. byte pairs:
//  - K (nhd/hnd/split, non-transposed): a lane receives 4 consecutive dims 4m..4m+3 (m = lane %
//    4) of a 16-dim chunk, so one k-step of the S^T MMA covers one 16-byte chunk with its dims
//    permuted (k index 2m + b <-> dim 4m + b, 8 + 2m + b <-> dim 4m + 2 + b); the query's B
//    fragments are read with the same permutation, which leaves every dot product unchanged;
//  - V nhd/hnd (transposed): a lane receives dims 2j, 2j + 1 of two consecutive tokens, which
//    one byte permutation turns into the A fragment of V^T with O^T row i holding dim 2i (i < 8)
//    or 2(i - 8) + 1 of the 16-dim group: the output store undoes that;
//  - V split ([dim][16 tokens] rows, non-transposed): a lane receives tokens 4m..4m+3 of a dim,
//    so the k index of the P V MMA is the token order 0,1,4,5,8,9,12,13,2,3,6,7,10,11,14,15; the
//    K rows are loaded in that order, which gives P^T (through movmatrix) the same order.
template <class T, int HEAD, bool SPLIT, int NT, int STAGES, bool PAIR, int KV = kKvSame,
          int RH = 0>
__global__ void __launch_bounds__(32 * decode_mma_warps(HEAD),
                                  decode_mma_bound_ctas(HEAD, NT, KV != kKvSame, STAGES))
    decode_mma_kernel(const DecodeParams p) {
  static_assert(!PAIR || (HEAD == 128 && !SPLIT && NT == 1), "pairs: head-64 nhd, GQA <= 4");
  constexpr bool F8 = KV != kKvSame;
  static_assert(!F8 || (!PAIR && std::is_same<T, __half>::value), "fp8: unpaired, fp16 MMAs");
  constexpr int EB = F8 ? 1 : 2;  // bytes per cache element
  constexpr int HO = PAIR ? HEAD / 2 : HEAD;  // output dims per query head
  // RH > 0 (decode_mma_maskable, decode_mma_instance_head): the masked instance of head RH
  // below HEAD, its dims past RH never copied, computed nor stored; a compile-time bound like
  // HEAD (one instance for every head with the bound at run time cost W1 21% at fp8 head 128
  // and 15% at bf16 head 256 on an H200: the unrolled k-step loops lost their overlap). hd: the
  // dims the MMAs need, ho: the output dims per query head.
  static_assert(RH == 0 || (decode_mma_maskable(HEAD, F8) && RH < HEAD && RH % 16 == 0),
                "a head below a maskable instance");
  constexpr bool MASK = RH != 0;
  constexpr int hd = MASK ? RH : HEAD;
  constexpr int ho = MASK ? RH : HO;
  // Head 512: 2 warps and 32-token tiles (decode_mma_warps); 4 and 64 otherwise.
  constexpr int WARPS = decode_mma_warps(HEAD);
  constexpr int NTHR = 32 * WARPS;
  constexpr int TOK = decode_mma_tile_tokens(HEAD);
  constexpr int CH = HEAD / 8;  // 16-byte chunks per query row
  constexpr int CHB = HEAD * EB / 16;  // 16-byte chunks per cache row
  // nhd/hnd copies: lanes per token row (8: whole 128-byte lines; 4 for 64-byte fp8 rows).
  constexpr int LPR = CHB < 8 ? CHB : 8;
  // nhd/hnd tiles: unpadded token rows whose 16-byte chunks are XOR-swizzled with the row
  // (chunk c of row r at c ^ (r % 8)), so that the 8 rows an ldmatrix phase reads fall in 8
  // different bank groups. Rows padded by 16 bytes would avoid the conflicts too, but then
  // most cp.async destinations straddle 128-byte lines, which costs ~8% of the copy rate
  // (docs/performance.md, "Where W1's time goes"). The swizzle needs one XOR per ldmatrix:
  // tiles start on 256-byte boundaries, so a lane's address for chunk c0 + 2s is its address
  // for chunk c0 with bits 5-7 XORed by s.
  // 64-byte rows (fp8 head 64): chunk c of row r at c ^ ((r / 2) % 4), which also puts the 8
  // rows of an ldmatrix phase in 8 bank groups.
  // Heads 80/96/112 (decode_mma_row_elems): 16-bit rows of 128 elements, of which the chunks
  // past the head are never copied nor read; a query row has the same pitch (QP elements).
  static_assert(HEAD % 16 == 0 && (!F8 || decode_mma_fp8_head_instance(HEAD)),
                "HEAD: k-steps of 16 dims (fp8: pairs of 16-byte chunks, whole swizzle groups)");
  constexpr int QP = decode_mma_row_elems(HEAD);
  constexpr unsigned PB = F8 ? HEAD * EB : QP * EB;  // bytes per token row
  constexpr unsigned TILE_B = TOK * PB;              // bytes per K (or V) tile
  // Rows of a power-of-two size keep "chunk c0 + 2s = address XOR 32 s" over the whole row;
  // 384-byte rows (head 192) only inside each 128-byte group of 8 chunks (chunk_off).
  constexpr bool POW2_ROW = (PB & (PB - 1)) == 0;
  constexpr int KSTEPS = HEAD / 16;
  constexpr int QJ = (KSTEPS + 1) / 2;  // x4 loads of Q^T fragments (two k-steps each)
  // Head 512: the 128 accumulators of O^T leave no room for the 64 registers of Q^T's
  // fragments (ptxas spilled ~230 bytes): they are reloaded from shared memory per k-step pair.
  constexpr bool QREG = HEAD <= 256;
  constexpr int DT = HEAD / 16;  // 16-dim row tiles of O^T
  constexpr int NH = 8 * NT;     // query-head columns
  constexpr int SO_PITCH = HEAD + 4;  // fp32 row pitch of the warp-merge buffer (no conflicts)
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ int s_work[2];
  __shared__ __align__(8) unsigned long long s_rx_bar;  // cluster mode: the partials have landed
  __shared__ float s_qinv[F8 ? 8 * NT : 1];  // fp8: the inverse of each query head's scale
  T* sQ = reinterpret_cast<T*>(smem_raw);
  // 256-byte aligned whatever the base of dynamic shared memory (decode_mma_smem_bytes
  // reserves the slack).
  // The swizzle XORs address bits below the row size (chunk_off: up to bit 9 for the 1024-byte
  // rows of head 512), so tiles start on a multiple of it (at least 256 bytes).
  constexpr unsigned AL = PB > 512 ? 1024u : PB > 256 ? 512u : 256u;
  const unsigned sK = (smem_addr(sQ + NH * QP) + (AL - 1)) & ~(AL - 1);
  const unsigned sV = sK + STAGES * TILE_B;
  // Cluster mode: the partial results the other splits push here (decode_cluster_rx_bytes:
  // [splits][share] outputs, then [splits][kClusterLseSlots] LSEs), past everything else, so
  // that a split that finishes first can write while this one still streams its tiles.
  const unsigned rx_s = sV + STAGES * TILE_B;
  // nhd/hnd ldmatrix: a lane's address for logical chunk c0 + 2s from its address for c0.
  auto chunk_off = [](unsigned a, int s) -> unsigned {
    if constexpr (POW2_ROW) return a ^ (static_cast<unsigned>(s) * 32u);
    else return (a ^ (static_cast<unsigned>(s & 3) * 32u)) + static_cast<unsigned>(s >> 2) * 128u;
  };

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const bool mods = p.softcap > 0.f || p.alibi != nullptr;
  const unsigned rx_bar = smem_addr(&s_rx_bar);
  griddep_launch_dependents();  // the merge kernel may launch once every CTA got here

  // Per-lane shared-memory addresses (stage 0); a stage adds a multiple of TILE_B and every
  // other offset is an immediate.
  //   nhd/hnd copies: 8 lanes per token row (whole 128-byte lines per copy instruction), rows
  //     lane/8 + 4i of the warp's 16, chunks lane%8 + 8j (swizzled: XOR lane/8 + 4(i%2), so
  //     k_dst is the address for even i and k_dst ^ 64 for odd i).
  //   nhd/hnd ldmatrix: row r = lane%8 (+8), logical chunk c0 (0 or 1, from the lane) + 2s at
  //     physical c0 ^ lane%8 ^ 2s: k_ld / v_ld hold it for s = 0.
  //   split copies: keys [chunk][token][8] (lane%16 = token, chunks lane/16 + 2k: 16 tokens of
  //     one chunk are contiguous in the cache), values [warp][dim][16 tokens] with the two
  //     8-token halves swapped on dims with bit 2 set (lane%2 = half, dims lane/2 + 16k).
  //   fp8 split: key rows hold a token's 16-dim chunk at token slot t ^ 2 (t / 8 % 2), so that
  //     the permuted token order of the ldmatrix rows (see above) is conflict-free; values
  //     [warp][dim][16 tokens], dims lane + 32k.
  unsigned k_dst, v_dst, k_ld, v_ld;
  if constexpr (F8 && !SPLIT) {
    if constexpr (LPR == 8) {  // rows lane/8 + 4i, as for 16-bit caches
      const int x = lane & 7;
      k_dst = sK + (warp * 16 + (lane >> 3)) * PB + ((x ^ (lane >> 3)) << 4);
    } else {  // rows lane/4 + 8i, chunk lane%4: the swizzle (r / 2) % 4 = (lane / 8) % 4
      k_dst = sK + (warp * 16 + (lane >> 2)) * PB + (((lane & 3) ^ ((lane >> 3) & 3)) << 4);
    }
    v_dst = k_dst + STAGES * TILE_B;
    // Row (lane%8) + 8 (lane/8 % 2), logical chunk lane/16 (+ 2s: address XOR 32 s).
    const int sw = LPR == 8 ? (lane & 7) : ((lane >> 1) & 3);
    k_ld = sK + (warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * PB + (((lane >> 4) ^ sw) << 4);
    v_ld = k_ld + STAGES * TILE_B;
  } else if constexpr (F8) {
    const int t = lane & 15;
    k_dst = sK + ((lane >> 4) * TOK + warp * 16 + (t ^ (((t >> 3) & 1) << 1))) * 16;
    v_dst = sV + (warp * HEAD + lane) * 16;
    const int tl = 4 * ((lane & 7) >> 1) + (lane & 1) + 2 * ((lane >> 3) & 1);
    k_ld = sK + ((lane >> 4) * TOK + warp * 16 + (tl ^ (((tl >> 3) & 1) << 1))) * 16;
    v_ld = sV + (warp * HEAD + (lane & 7) + (lane >> 3) * 8) * 16;
  } else if constexpr (!SPLIT) {
    const int x = lane & 7;
    k_dst = sK + (warp * 16 + (lane >> 3)) * PB + ((x ^ (lane >> 3)) << 4);
    v_dst = k_dst + STAGES * TILE_B;
    k_ld = sK + (warp * 16 + x + ((lane >> 3) & 1) * 8) * PB + (((lane >> 4) ^ x) << 4);
    v_ld = sV + (warp * 16 + x + ((lane >> 4) & 1) * 8) * PB + ((((lane >> 3) & 1) ^ x) << 4);
  } else {
    k_dst = sK + ((lane >> 4) * TOK + warp * 16 + (lane & 15)) * 16;
    const int d0 = lane >> 1, h = lane & 1;
    v_dst = sV + (warp * HEAD + d0) * 32 + ((h ^ ((d0 >> 2) & 1)) << 4);
    k_ld = sK + ((lane >> 4) * TOK + warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * 16;
    const int d1 = (lane & 7) + ((lane >> 3) & 1) * 8;
    v_ld = sV + (warp * HEAD + d1) * 32 + (((lane >> 4) ^ ((d1 >> 2) & 1)) << 4);
  }

  // Work-list mode (skewed batches): the (sequence, split) items of all sequences are numbered
  // and the CTAs stride over them, so no CTA is launched for a split a short sequence does not
  // have. Full-length splits come first and each sequence's last (usually shorter) split after
  // them, and the KV head is the fastest grid dimension, so the longest items start first and
  // the short ones fill the gaps at the end (longest-processing-time-first order). Warp 0 keeps
  // each lane's sequences' split counts; the two counts are scanned packed in one integer
  // (full << 10 | last, at most 256 last items).
  int cnt[kListPerLane];
  int lane_first = 0, lane_full = 0, lane_last = 0, total_full = 0, total_items = 0, per_lane = 0;
  if (p.work_list && warp == 0) {
    per_lane = (p.num_seqs + 31) >> 5;
#pragma unroll
    for (int i = 0; i < kListPerLane; ++i) {
      const int s = lane * per_lane + i;
      cnt[i] = (i < per_lane && s < p.num_seqs) ? seq_splits(p, s) : 0;
      lane_full += max(cnt[i] - 1, 0);
      lane_last += cnt[i] > 0 ? 1 : 0;
    }
    const int mine = (lane_full << 10) | lane_last;
    int x = mine;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, x, o);
      if (lane >= o) x += y;
    }
    lane_first = x - mine;
    const int total = __shfl_sync(0xffffffffu, x, 31);
    total_full = total >> 10;
    total_items = total_full + (total & 1023);
  }
  const int g = p.work_list ? blockIdx.x : blockIdx.y;
  const int item0 = p.work_list ? blockIdx.y : blockIdx.x;
  const int item_stride = p.work_list ? gridDim.y : gridDim.x;

  const char* kbase = static_cast<const char*>(p.k) + static_cast<std::int64_t>(g) * p.k_head * EB;
  const char* vbase = static_cast<const char*>(p.v) + static_cast<std::int64_t>(g) * p.v_head * EB;

  for (int item = item0;; item += item_stride) {
    int s, split;
    if (p.work_list) {
      if (warp == 0) {
        const int first_full = lane_first >> 10, first_last = lane_first & 1023;
        int found = -1, fsplit = 0;
        if (item < total_full) {
          int r = item - first_full;
          if (r >= 0 && r < lane_full) {
#pragma unroll
            for (int i = 0; i < kListPerLane; ++i) {
              const int full = max(cnt[i] - 1, 0);
              if (found < 0 && r < full) {
                found = lane * per_lane + i;
                fsplit = r;
              }
              r -= full;
            }
          }
        } else {
          int r = item - total_full - first_last;
          if (r >= 0 && r < lane_last) {
#pragma unroll
            for (int i = 0; i < kListPerLane; ++i) {
              if (cnt[i] > 0) {
                if (found < 0 && r == 0) {
                  found = lane * per_lane + i;
                  fsplit = cnt[i] - 1;
                }
                --r;
              }
            }
          }
        }
        if (found >= 0) {
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
      if (item != item0) break;  // one item per CTA
      s = blockIdx.z;
      split = blockIdx.x;
    }
    // The sequence's metadata loads go out together (the length does not depend on the query
    // start), before the cluster set-up below, whose memory clobbers keep them ahead of it:
    // in a latency-bound call each dependent round trip is ~0.5 us.
    const int q0 = p.qsl[s * p.qsl_stride];
    const int q1 = p.qsl[(s + 1) * p.qsl_stride];
    const int len = p.seq_lens[s * p.sl_stride];
    if (p.cluster) {  // one item per CTA in cluster mode: this runs once
      // The barrier expects every split's partials for this CTA's share of the outputs. Every
      // thread arrives at the cluster barrier now and waits on it only before its first
      // remote write, by which time all CTAs have long initialised their barriers.
      if (tid == 0) {
        const int total = p.gqa * ho;
        const int mine =
            min(p.cl_share, max(0, total - static_cast<int>(cluster_rank()) * p.cl_share));
        mbar_init(rx_bar, 1);
        mbar_arrive_expect_tx(rx_bar, static_cast<unsigned>(p.max_splits * (mine + p.gqa) * 4));
        fence_mbar_init_cluster();
      }
      cluster_arrive_relaxed();
    }
    if (q1 - q0 != 1) {
      // Not a decode row: uniform over a cluster (its CTAs share the sequence).
      __syncthreads();  // s_work is rewritten for the next item
      continue;
    }
    int start = 0, valid_lo = 0, end = 0, nsplit = 0;
    const bool has_work = split_range(p, len, split, &start, &valid_lo, &end, &nsplit);
    if (!has_work && !p.cluster) {
      __syncthreads();
      continue;
    }
    const int q_pos = len - 1;
    const int* bt = p.block_table + static_cast<std::int64_t>(s) * p.bt_seq;
    // Opaque to the compiler: otherwise it re-forms s * bt_seq (a 64-bit multiply) in every
    // block-table load of the tile loop.
    asm("" : "+l"(bt));

    float m_run[NT][2], l_run[NT][2];
    float o[DT][NT][4];
    online_softmax_init(m_run, l_run, o);

    if (has_work) {
      // Query rows of the GQA group (rows >= gqa are zero and never written back).
      // Pairs: a column's 64 dims go to its KV head's half of the row, the other half is zero.
      for (int i = tid; i < NH * CH; i += NTHR) {
        const int r = i / CH, c = i % CH;
        // Masked heads: the chunks past the head are zero (c * 8 >= hd).
        const bool ok = r < p.gqa && (!PAIR || (c >= CH / 2) == (2 * r >= p.gqa)) &&
                        (!MASK || c * 8 < hd);
        const int qc = PAIR ? c % (CH / 2) : c;
        const T* src = static_cast<const T*>(p.q);
        if (ok) src += static_cast<std::int64_t>(q0) * p.q_tok +
                       static_cast<std::int64_t>(g * p.gqa + r) * p.q_head + qc * 8;
        cp_async16(smem_addr(sQ + swz(r, c, QP)), src, ok ? 16 : 0);
      }
      cp_async_commit();

      // Every warp copies exactly the 16 token rows it computes on (tokens warp*16 .. +15 of
      // each tile), so it waits for its own copies only: no CTA barrier per tile, and a slow
      // warp never stalls the others. Each lane's rows of a tile are fixed by its lane index,
      // so the block-table entries it needs for tile n+1 are fetched into registers while tile
      // n computes (the copies never wait on a block-table load), and the lane's cursors step
      // from tile to tile by additions. Masked rows keep block 0 / offset 0 (a valid address)
      // and copy zero bytes.
      constexpr int NR = SPLIT ? 1 : 16 * LPR / 32;  // key rows per lane
      constexpr int VCT = F8 ? 16 : 8;  // split layout: tokens per value chunk
      TokenCursor kc[NR], vc;
      int kid[NR], koff[NR];
      bool kok[NR];
      int vid = 0, voff = 0, vbytes = 0;
      {
        const int tw0 = start + warp * 16;
#pragma unroll
        for (int i = 0; i < NR; ++i)
          kc[i].init(p, tw0 + (SPLIT      ? (lane & 15)
                               : LPR == 8 ? (lane >> 3) + 4 * i
                                          : (lane >> 2) + 8 * i));
        if constexpr (SPLIT) vc.init(p, tw0 + (F8 ? 0 : (lane & 1) * 8));
      }
      const unsigned range = static_cast<unsigned>(end - valid_lo);
      auto fetch_ids = [&]() {
#pragma unroll
        for (int i = 0; i < NR; ++i) {
          const bool ok = static_cast<unsigned>(kc[i].t - valid_lo) < range;
          kid[i] = ok ? __ldg(bt + kc[i].blk * p.bt_blk) : 0;
          koff[i] = ok ? kc[i].off : 0;
          kok[i] = ok;
          kc[i].template advance<TOK>(p);
        }
        if constexpr (SPLIT) {
          // A value chunk is 8 tokens of one head dim, inside one block (block_size % 8 == 0);
          // bytes at or past seq_len are zero-filled (the tail of the last block may hold
          // anything, NaN included).
          const bool any = vc.t + VCT > valid_lo && vc.t < end;
          vid = any ? __ldg(bt + vc.blk * p.bt_blk) : 0;
          voff = any ? vc.off : 0;
          vbytes = any ? EB * min(VCT, len - vc.t) : 0;
          vc.template advance<TOK>(p);
        }
      };
      auto issue_tile = [&](int stage) {
        const unsigned kd = k_dst + stage * TILE_B;
        if constexpr (!SPLIT && LPR == 4) {
#pragma unroll
          for (int i = 0; i < NR; ++i) {
            const char* ks = kbase + static_cast<std::uint64_t>(static_cast<unsigned>(kid[i])) * p.k_blk +
                             static_cast<std::uint64_t>(static_cast<unsigned>(koff[i])) * p.k_tok + (lane & 3) * 16;
            const char* vs = vbase + static_cast<std::uint64_t>(static_cast<unsigned>(kid[i])) * p.v_blk +
                             static_cast<std::uint64_t>(static_cast<unsigned>(koff[i])) * p.v_tok + (lane & 3) * 16;
            const int bytes = kok[i] ? 16 : 0;
            const unsigned d = kd + i * 8 * PB;
            cp_async16(d, ks, bytes);
            cp_async16(d + STAGES * TILE_B, vs, bytes);
          }
        } else if constexpr (!SPLIT) {
#pragma unroll
          for (int i = 0; i < NR; ++i) {
            const char* ks = kbase + static_cast<std::uint64_t>(static_cast<unsigned>(kid[i])) * p.k_blk +
                             static_cast<std::uint64_t>(static_cast<unsigned>(koff[i])) * p.k_tok + (lane & 7) * 16;
            const char* vs = vbase + static_cast<std::uint64_t>(static_cast<unsigned>(kid[i])) * p.v_blk +
                             static_cast<std::uint64_t>(static_cast<unsigned>(koff[i])) * p.v_tok + (lane & 7) * 16;
            const int bytes = kok[i] ? 16 : 0;
#pragma unroll
            for (int j = 0; j < (CHB + 7) / 8; ++j) {
              // Heads 80/96/112: the row's last group of 8 chunks is partial (lanes past the
              // head copy nothing: their shared-memory chunks are never read).
              if (CHB % 8 != 0 && j == CHB / 8 && (lane & 7) >= CHB % 8) continue;
              // Masked heads: only the head's chunks (16 / EB dims each) are copied.
              if (MASK && ((lane & 7) + 8 * j) * (16 / EB) >= hd) continue;
              const unsigned d = ((i & 1) ? kd ^ 64u : kd) + i * 4 * PB + j * 128;
              cp_async16(d, ks + j * 128, bytes);
              cp_async16(d + STAGES * TILE_B, vs + j * 128, bytes);
            }
          }
        } else {
          const char* ks = kbase + static_cast<std::uint64_t>(static_cast<unsigned>(kid[0])) * p.k_blk +
                           static_cast<std::uint64_t>(static_cast<unsigned>(koff[0])) * p.k_tok +
                           static_cast<std::uint64_t>(lane >> 4) * p.k_chunk;
          const int kbytes = kok[0] ? 16 : 0;
#pragma unroll
          for (int k = 0; k < CHB / 2; ++k)
            if (!MASK || ((lane >> 4) + 2 * k) * (16 / EB) < hd)
              cp_async16(kd + k * 2 * TOK * 16, ks + static_cast<std::uint64_t>(2 * k) * p.k_chunk,
                         kbytes);
          const unsigned vd = v_dst + stage * TILE_B;
          if constexpr (F8) {
            const char* vs = vbase + static_cast<std::uint64_t>(static_cast<unsigned>(vid)) * p.v_blk +
                             static_cast<std::uint64_t>(lane) * p.v_dim + voff;
#pragma unroll
            for (int k = 0; k < HEAD / 32; ++k)
              if (!MASK || lane + 32 * k < hd)
                cp_async16(vd + k * 32 * 16, vs + static_cast<std::uint64_t>(32 * k) * p.v_dim,
                           vbytes);
            return;
          }
          const char* vs = vbase + static_cast<std::uint64_t>(static_cast<unsigned>(vid)) * p.v_blk +
                           static_cast<std::uint64_t>(lane >> 1) * p.v_dim + voff * 2;
#pragma unroll
          for (int k = 0; k < HEAD / 16; ++k)
            if (!MASK || (lane >> 1) + 16 * k < hd)
              cp_async16(vd + k * 16 * 32, vs + static_cast<std::uint64_t>(16 * k) * p.v_dim,
                         vbytes);
        }
      };

      if constexpr (F8 && MASK) {
        // fp8 masked heads: a k-step pair is 32 dims, so a head of 16 (mod 32) dims reads one
        // key chunk past it, which must be zero (never copied: the merge buffers of the
        // previous item may have left anything there, NaN included). Each warp zeroes the key
        // chunks past the head in its own rows of every stage; the dead value dims only feed
        // O^T rows that are never stored. The barrier before the tile loop orders them.
        constexpr int dead = CHB - hd / 16;
        for (int e = lane; e < STAGES * 16 * dead; e += 32) {
          const int st = e / (16 * dead), rr = (e / dead) % 16, c = hd / 16 + e % dead;
          const unsigned a =
              SPLIT ? sK + st * TILE_B + (c * TOK + warp * 16 + rr) * 16
                    : sK + st * TILE_B + (warp * 16 + rr) * PB + ((c ^ (rr & 7)) << 4);
          asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};" ::"r"(a), "r"(0) : "memory");
        }
      }
      const int ntiles = (end - start + TOK - 1) / TOK;
#pragma unroll
      for (int st = 0; st < STAGES - 1; ++st) {
        fetch_ids();
        // Tiles past the end have every row masked: their copies read nothing.
        issue_tile(st);
        cp_async_commit();
      }
      fetch_ids();
      cp_async_wait<STAGES - 1>();  // the query group
      __syncthreads();

      unsigned qf[NT][QREG ? QJ : 1][4];
      // !QREG: this lane's ldmatrix address of Q^T pair 0 (row lane % 8, chunk lane / 8);
      // pair j is chunk 4j + lane / 8, i.e. the offset in the row XORed by 64 j (rows of
      // 1024 bytes: the swizzle c ^ (r % 8) only touches the chunk's low 3 bits).
      const unsigned q_row = smem_addr(sQ + (lane & 7) * QP);
      const unsigned q_off = static_cast<unsigned>(((lane >> 3) ^ (lane & 7)) << 4);
      // fp8: the B fragments of k-steps 2j and 2j + 1 into slot (QREG ? j : 0) of `f`. The
      // permuted k-step c (dims 16c..16c+15) takes dims 16c + 4m .. + 3 of head nt*8 + lane/4
      // (m = lane % 4), held at (b0, b1) as for 16-bit caches.
      auto fp8_q_frags = [&](unsigned (&f)[NT][QREG ? QJ : 1][4], int j) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int c = 2 * j + h, r = nt * 8 + (lane >> 2), m = lane & 3;
            const uint2 w = *reinterpret_cast<const uint2*>(sQ + swz(r, 2 * c + (m >> 1), HEAD) +
                                                            4 * (m & 1));
            f[nt][QREG ? j : 0][h * 2] = w.x;
            f[nt][QREG ? j : 0][h * 2 + 1] = w.y;
          }
      };
      if constexpr (F8) {
        if (p.q_bf16) {
          // bf16 query -> fp16 in place, head row r times 2^s_r with s_r = 14 - exponent of its
          // largest |q| (so it stays below 2^15); s_qinv[r] = 2^-s_r undoes it in the scores.
          // A zero, infinite or NaN maximum keeps s_r = 0 (inf and NaN pass through).
          constexpr int E = HEAD / 32;  // elements per lane (a row's chunks, in any order)
          for (int r = warp; r < NH; r += WARPS) {
            std::uint16_t* row = reinterpret_cast<std::uint16_t*>(sQ) + r * HEAD + lane * E;
            float v[E], mx = 0.f;
#pragma unroll
            for (int e = 0; e < E; ++e) {
              v[e] = __uint_as_float(static_cast<unsigned>(row[e]) << 16);
              mx = fmaxf(mx, fabsf(v[e]));
            }
            mx = warp_max(mx);
            int sh = 0;
            if (mx > 0.f && mx <= 3.4028235e38f)
              sh = min(100, max(-100, 14 - (static_cast<int>(__float_as_uint(mx) >> 23) - 127)));
            const float mul = __uint_as_float(static_cast<unsigned>(127 + sh) << 23);
#pragma unroll
            for (int e = 0; e < E; ++e) row[e] = __half_as_ushort(__float2half_rn(v[e] * mul));
            if (lane == 0) s_qinv[r] = __uint_as_float(static_cast<unsigned>(127 - sh) << 23);
          }
        } else if (tid < NH) {
          s_qinv[tid] = 1.f;
        }
        __syncthreads();
        // B fragments of the permuted k-steps (fp8_q_frags); head 512 reads them per k-step
        // pair in the S^T loop instead (!QREG).
        if constexpr (QREG) {
#pragma unroll
          for (int j = 0; j < QJ; ++j) fp8_q_frags(qf, j);
        }
      } else {
        // B fragments of Q^T (k = head dims, n = heads): matrix m of an x4 load is dims
        // [8(4j + m), +8) of heads nt*8 + 0..7, i.e. (b0, b1) of k-steps 2j and 2j + 1. An odd
        // KSTEPS (heads 80, 112): the last load's matrices 2-3 are chunks of the padded row
        // past the head, never used.
        if constexpr (QREG) {
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int j = 0; j < QJ; ++j)
              ldmatrix_x4(qf[nt][j], smem_addr(sQ + swz(nt * 8 + (lane & 7), j * 4 + (lane >> 3), QP)));
        }
      }
      // fp8: the score multiplier of each column (softmax scale, k_scale, the query's scale).
      float cmul[NT][2];
      if constexpr (F8) {
        const float ks =
            cache_scale(p.k_scales, p.scales_stride, g, p.k_scale) * (mods ? p.scale : p.scale_log2);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int b = 0; b < 2; ++b) cmul[nt][b] = ks * s_qinv[nt * 8 + 2 * (lane & 3) + b];
      }

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

      int stage = 0, issue_stage = STAGES - 1;
      for (int it = 0; it < ntiles; ++it) {
        cp_async_wait<STAGES - 2>();
        __syncwarp();  // the warp's own rows of tile `it` have landed; its reads of tile it-1 are done
        {
          const int nt = it + STAGES - 1;
          if (nt < ntiles) issue_tile(issue_stage);
          cp_async_commit();
          if (nt + 1 < ntiles) fetch_ids();
          issue_stage = issue_stage == STAGES - 1 ? 0 : issue_stage + 1;
        }
        const unsigned kst = k_ld + stage * TILE_B;
        const unsigned vst = v_ld + stage * TILE_B;
        stage = stage == STAGES - 1 ? 0 : stage + 1;
        const int tw = start + it * TOK + warp * 16;  // first token of this warp's 16
        if (tw + 16 <= valid_lo || tw >= end) continue;

        // S^T (16 tokens x NH heads); two accumulators halve the dependent MMA chain.
        float sc[NT][4], sc2[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) sc[nt][e] = sc2[nt][e] = 0.f;
        if constexpr (F8) {
#pragma unroll
          for (int s2 = 0; s2 < KSTEPS / 2; ++s2) {
            if (MASK && 32 * s2 >= hd) break;  // past a masked head
            // Chunks 2 s2 and 2 s2 + 1 of 16 tokens: matrices (tokens 0-7, 8-15) x 2 chunks.
            unsigned r[4];
            ldmatrix_x4(r, SPLIT ? kst + s2 * 2 * TOK * 16 : kst ^ (s2 * 32u));
            if constexpr (!QREG) fp8_q_frags(qf, s2);
            const int qs = QREG ? s2 : 0;
            unsigned a0[4], a1[4];
            fp8_pairs_to_h2<KV>(r[0], &a0[0], &a0[2]);
            fp8_pairs_to_h2<KV>(r[1], &a0[1], &a0[3]);
            fp8_pairs_to_h2<KV>(r[2], &a1[0], &a1[2]);
            fp8_pairs_to_h2<KV>(r[3], &a1[1], &a1[3]);
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
              mma16816<T>(sc[nt], a0, qf[nt][qs][0], qf[nt][qs][1]);
              mma16816<T>(sc2[nt], a1, qf[nt][qs][2], qf[nt][qs][3]);
            }
          }
        } else
#pragma unroll
        for (int kk = 0; kk < KSTEPS; ++kk) {
          // Pairs: the dims of KV head 2g (k-steps 0..KSTEPS/2-1) go to sc, those of 2g + 1 to
          // sc2, so that each column reads only its own head's products (a non-finite key of
          // the other head times the zero half of the query would be NaN).
          const int ks = PAIR ? (kk >> 1) + (kk & 1) * (KSTEPS / 2) : kk;
          if (MASK && 16 * ks >= hd) break;  // past a masked head
          unsigned a[4];
          ldmatrix_x4(a, SPLIT ? kst + ks * 2 * TOK * 16 : chunk_off(kst, ks));
          if constexpr (!QREG) {
            static_assert(NT == 1 && !PAIR, "head 512: GQA <= 8, unpaired");
            if ((ks & 1) == 0) ldmatrix_x4(qf[0][0], q_row + (q_off ^ ((ks >> 1) * 64u)));
          }
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            const unsigned b0 = qf[nt][QREG ? ks >> 1 : 0][(ks & 1) * 2];
            const unsigned b1 = qf[nt][QREG ? ks >> 1 : 0][(ks & 1) * 2 + 1];
            if (kk & 1) mma16816<T>(sc2[nt], a, b0, b1);
            else mma16816<T>(sc[nt], a, b0, b1);
          }
        }

        // Element e of a fragment: token tw + lane/4 + 8*(e/2), head column 2*(lane%4) + e%2.
        // Scores in log2 units. Softcap, ALiBi and masking cost per-element instructions, so
        // they run only where needed (the branches are warp-uniform).
        const bool edge = tw < valid_lo || tw + 16 > end;
        float mx[NT][2];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          mx[nt][0] = mx[nt][1] = -INFINITY;
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int b = e & 1;
            // fp8 split: MMA row i holds token 0,1,4,5,8,9,12,13,2,3,... (see the kernel's top).
            const int j = F8 && SPLIT ? tw + 4 * (lane >> 3) + ((lane >> 2) & 1) + 2 * (e >> 1)
                                      : tw + (lane >> 2) + (e >> 1) * 8;
            float z;
            if constexpr (F8)
              z = score_log2_mul(p, sc[nt][e] + sc2[nt][e], mods, cmul[nt][b], slope[nt][b],
                                 j - q_pos);
            else
              z = score_log2(
                  p,
                  !PAIR ? sc[nt][e] + sc2[nt][e]
                        : (2 * (2 * (lane & 3) + b) >= p.gqa ? sc2[nt][e] : sc[nt][e]),
                  mods, slope[nt][b], j - q_pos);
            if (edge && (j < valid_lo || j >= end)) z = -INFINITY;
            sc[nt][e] = z;
            mx[nt][b] = fmaxf(mx[nt][b], z);
          }
        }
        float corr[NT][2];
        unsigned pb[NT][2];
        online_softmax_step<T, NT>(mx, sc, m_run, l_run, corr, pb);
        // Once the running maxima settle (after a few tiles, typically) no accumulator needs
        // rescaling: skip the multiplies unless some head's maximum moved (warp-uniform test).
        bool moved = false;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) moved |= corr[nt][0] != 1.f || corr[nt][1] != 1.f;
        if (__any_sync(0xffffffffu, moved)) rescale_accumulators(o, corr);
        if constexpr (F8) {
#pragma unroll
          for (int s2 = 0; s2 < DT / 2; ++s2) {
            if (MASK && 32 * s2 >= hd) break;  // past a masked head
            // Row tiles 2 s2 and 2 s2 + 1 of V^T.
            unsigned r[4], a0[4], a1[4];
            if constexpr (SPLIT) {
              ldmatrix_x4(r, vst + s2 * 32 * 16);  // dims 0-7, 8-15, 16-23, 24-31 (+32 s2)
              fp8_pairs_to_h2<KV>(r[0], &a0[0], &a0[2]);
              fp8_pairs_to_h2<KV>(r[1], &a0[1], &a0[3]);
              fp8_pairs_to_h2<KV>(r[2], &a1[0], &a1[2]);
              fp8_pairs_to_h2<KV>(r[3], &a1[1], &a1[3]);
            } else {
              ldmatrix_x4_trans(r, vst ^ (s2 * 32u));  // (tokens 0-7, 8-15) x 2 chunks
              fp8_trans_to_h2<KV>(r[0], &a0[0], &a0[1]);
              fp8_trans_to_h2<KV>(r[1], &a0[2], &a0[3]);
              fp8_trans_to_h2<KV>(r[2], &a1[0], &a1[1]);
              fp8_trans_to_h2<KV>(r[3], &a1[2], &a1[3]);
            }
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
              mma16816<T>(o[2 * s2][nt], a0, pb[nt][0], pb[nt][1]);
              mma16816<T>(o[2 * s2 + 1][nt], a1, pb[nt][0], pb[nt][1]);
            }
          }
        } else
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) {
          if (MASK && 16 * dt >= hd) break;  // past a masked head
          // A fragment of V^T (16 dims x 16 tokens).
          unsigned a[4];
          if constexpr (SPLIT) ldmatrix_x4(a, vst + dt * 16 * 32);
          else ldmatrix_x4_trans(a, chunk_off(vst, dt));
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) mma16816<T>(o[dt][nt], a, pb[nt][0], pb[nt][1]);
        }
      }
      cp_async_wait<0>();
    }
    __syncthreads();

    // Merge the four warps' states (fixed order: deterministic). Maxima in log2 units.
    float* red_m = reinterpret_cast<float*>(smem_raw);  // [WARPS][NH]
    float* red_l = red_m + WARPS * NH;                  // [WARPS][NH]
    float* fin = red_l + 4 * NH;                        // [2][NH]: scale, LSE per head
    float* so = fin + 2 * NH;                           // [WARPS][NH][SO_PITCH]
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int b = 0; b < 2; ++b) {
        const float l = sum_over_token_lanes(l_run[nt][b]);
        if (lane < 4) {
          const int h = nt * 8 + 2 * lane + b;
          red_m[warp * NH + h] = m_run[nt][b];
          red_l[warp * NH + h] = l;
        }
      }
    __syncthreads();
    const bool single = nsplit == 1 && !p.cluster;
    float f[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int b = 0; b < 2; ++b) {
        const int h = nt * 8 + 2 * (lane & 3) + b;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) M = fmaxf(M, red_m[w * NH + h]);
        const float base = softmax_base(M);
        f[nt][b] = ex2(m_run[nt][b] - base);
        if (warp == 0 && lane < 4) {
          float L = 0.f;
#pragma unroll
          for (int w = 0; w < WARPS; ++w) L += red_l[w * NH + h] * ex2(red_m[w * NH + h] - base);
          // Per head, once: the factor that turns the summed accumulator into this CTA's
          // output (or partial output) and the LSE that goes with it (natural log). A split
          // without keys (cluster mode only) has L = 0 and M = -inf: weight 0 in the merge.
          // NaN scores make L NaN, and NaN passes through both (L != 0).
          float scale = L != 0.f ? 1.f / L : 0.f;
          float lse = L != 0.f ? base * kLn2 + __logf(L) : -INFINITY;
          // A whole row (one split) with keys whose logits are all -inf: the softmax is 0/0,
          // NaN as in the oracle (with a sink, below, it is the sink's alone).
          if (single && L == 0.f) scale = lse = NAN;
          if (single && p.sinks != nullptr && h < p.gqa) {
            // The sink joins the softmax denominator only (its value row is zero).
            const float Ms = M * kLn2;
            const float sk = p.sinks[static_cast<std::int64_t>(g * p.gqa + h) * p.sinks_stride];
            const float M2 = fmaxf(Ms, sk);
            const float Ls = L * __expf(Ms - M2) + __expf(sk - M2);
            scale = __expf(Ms - M2) / Ls;
            lse = M2 + __logf(Ls);
          }
          if constexpr (F8) scale *= cache_scale(p.v_scales, p.scales_stride, g, p.v_scale);
          fin[h] = scale;
          fin[NH + h] = lse;
        }
      }
#pragma unroll
    for (int dt = 0; dt < DT; ++dt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int h = nt * 8 + 2 * (lane & 3) + (e & 1);
          // fp8 nhd/hnd: row i of a 16-dim tile is dim 2i (i < 8) or 2(i - 8) + 1.
          const int d = F8 && !SPLIT ? dt * 16 + 2 * (lane >> 2) + (e >> 1)
                                     : dt * 16 + (lane >> 2) + (e >> 1) * 8;
          so[(warp * NH + h) * SO_PITCH + d] = o[dt][nt][e] * f[nt][e & 1];
        }
    __syncthreads();

    const std::int64_t part_row =
        (static_cast<std::int64_t>(s) * p.max_splits + split) * p.num_heads;
    const unsigned csize = static_cast<unsigned>(p.max_splits);
    const unsigned rank = p.cluster ? cluster_rank() : 0u;
    const unsigned rx_lse = rx_s + csize * p.cl_share * 4;  // [splits][kClusterLseSlots]
    if (p.cluster) cluster_wait();  // every CTA's barrier is initialised: remote writes may start
    for (int i = tid; i < p.gqa * ho; i += NTHR) {
      const int r = i / ho, d = i % ho;
      const int h = g * p.gqa + r;
      const int sd = PAIR && 2 * r >= p.gqa ? d + HO : d;  // O^T's row of output dim d
      float acc = 0.f;
#pragma unroll
      for (int w = 0; w < WARPS; ++w) acc += so[(w * NH + r) * SO_PITCH + sd];
      const float v = acc * fin[r];
      const float lse = fin[NH + r];
      if (p.cluster) {
        // Element i goes to the CTA that combines it; each head's LSE to every CTA.
        const unsigned owner = p.cl_div.div(static_cast<unsigned>(i));
        const unsigned e = static_cast<unsigned>(i) - owner * p.cl_share;
        st_async_f32(map_rank(rx_s + (rank * p.cl_share + e) * 4, owner), v,
                     map_rank(rx_bar, owner));
        if (d == 0)
          for (unsigned j = 0; j < csize; ++j)
            st_async_f32(map_rank(rx_lse + (rank * kClusterLseSlots + r) * 4, j), lse,
                         map_rank(rx_bar, j));
      } else if (single) {
        if (F8 && p.q_bf16)
          store_output<__nv_bfloat16>(p, q0, h, d, v, lse);
        else
          store_output<T>(p, q0, h, d, v, lse);
      } else {
        p.part_o[(part_row + h) * ho + d] = v;
        if (d == 0) p.part_lse[part_row + h] = lse;
      }
    }
    if (p.cluster) {
      // Combine this CTA's share of the (head, dim) outputs over all splits, from its own
      // shared memory once every split's partials have landed (fixed order: deterministic).
      mbar_wait_cluster(rx_bar, 0);
      const float* rx = reinterpret_cast<const float*>(smem_raw + (rx_s - smem_addr(smem_raw)));
      const float* rx_l = rx + csize * p.cl_share;
      const int first = static_cast<int>(rank) * p.cl_share;
      const int mine = min(p.cl_share, p.gqa * ho - first);
      for (int e = tid; e < mine; e += NTHR) {
        const int i = first + e;
        const int r = i / ho, d = i % ho;
        const int h = g * p.gqa + r;
        // All loads before any use (ranks past the cluster read rank 0 and are masked).
        float lse_k[kMaxClusterSplits], o_k[kMaxClusterSplits];
#pragma unroll
        for (int k = 0; k < kMaxClusterSplits; ++k) {
          const int src = k < static_cast<int>(csize) ? k : 0;
          lse_k[k] = rx_l[src * kClusterLseSlots + r];
          o_k[k] = rx[src * p.cl_share + e];
        }
        float M = -INFINITY;
#pragma unroll
        for (int k = 0; k < kMaxClusterSplits; ++k) {
          if (k >= static_cast<int>(csize)) lse_k[k] = -INFINITY;
          M = fmaxf(M, lse_k[k]);
        }
        float sk = -INFINITY;
        if (p.sinks != nullptr) {
          sk = p.sinks[static_cast<std::int64_t>(h) * p.sinks_stride];
          M = fmaxf(M, sk);
        }
        // M is -inf when every split's LSE is NaN (NaN scores): softmax_base keeps them NaN.
        const float base = softmax_base(M);
        float den = __expf(sk - base), acc = 0.f;
#pragma unroll
        for (int k = 0; k < kMaxClusterSplits; ++k) {
          // Weight 0 for an empty split or a rank past the cluster.
          const float w = lse_k[k] == -INFINITY ? 0.f : __expf(lse_k[k] - base);
          den += w;
          acc += w * o_k[k];
        }
        // den = 0: every key's logit is -inf and no sink, 0/0 (NaN) as in the oracle.
        const float lse_all = den != 0.f ? base + __logf(den) : NAN;
        if (F8 && p.q_bf16)
          store_output<__nv_bfloat16>(p, q0, h, d, acc / den, lse_all);
        else
          store_output<T>(p, q0, h, d, acc / den, lse_all);
      }
    }
    __syncthreads();  // the next item reuses shared memory and s_work
  }
}

}  // namespace

}  // namespace pagedattn::cuda
