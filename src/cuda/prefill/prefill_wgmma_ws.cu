// The warp-specialised Hopper prefill kernel (prefill_wgmma.h, prefill_ws_*): the same rows,
// tiles, swizzled layouts and softmax as prefill_wgmma.cu, with the roles split.
//
// CTA = 3 warpgroups. Warpgroup 0 is the producer: it lowers its register budget
// (setmaxnreg) and fills, tile after tile, the K and then the V rows of TOK tokens through the
// block table into ring slots of shared memory. Where the page geometry allows it (tma_box > 0:
// block_size a multiple of 8 that divides TOK or that TOK divides, 16-byte strides) every page
// segment of a tile that lies wholly inside the rows' key range [kv_lo, kv_hi) is one TMA box
// per 64 head dims (cp.async.bulk.tensor, one lane per segment, the segments spread over the 4
// producer warps, completing bytes on
// the slot's "full" mbarrier; the box lands in the same 128B-swizzled layout the wgmmas read,
// and a block id outside the cache is outside the tensor map, so it reads as zeros). The other
// rows (the partial first and last segments, or all of them without TMA) are gathered with
// 16-byte cp.async and zero-filled outside the range; each thread's copies complete on the
// same barrier (cp.async.mbarrier.arrive.noinc: 128 arrivals; each warp adds its boxes' bytes
// with mbarrier.expect_tx before it issues them). K and
// V have separate rings, so a K slot is free once both consumers' S GEMMs read it and a V slot
// once their PV GEMMs did ("empty" mbarriers, one arrival per consumer warp: 8).
// Warpgroups 1 and 2 are the consumers (64 rows each, registers raised): per key tile j they
// wait for K_j (and V_{j-1}), then (head 128: in turn with the other consumer, named
// barriers 1 and 2) issue S_j = Q K_j^T and O += P_{j-1} V_{j-1} as two wgmma groups, hand
// the turn over, wait
// for the first and compute the softmax of S_j while their own PV and the other consumer's
// GEMMs run; O is rescaled and P_j packed once the PV group completed. A
// final turn issues the last PV. Phases: slot s of use u (tile u * STAGES + s) completes full
// phase u; the producer waits for empty phase u - 1 before refilling it.
//
// Visibility: the consumer that observed a full phase (acquire) orders the cp.async writes
// before its wgmma reads with fence.proxy.async (generic -> async proxy).
#include <cuda.h>  // CUtensorMap
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <string>
#include <type_traits>
#include <unordered_map>

#include "src/cuda/common/cache_index.h"
#include "src/cuda/common/cuda_common.cuh"
#include "src/cuda/common/mbarrier.cuh"
#include "src/cuda/common/mma_common.cuh"
#include "src/cuda/prefill/prefill_wgmma.h"
#include "src/cuda/prefill/prefill_wgmma_params.cuh"
#include "src/cuda/prefill/wgmma_util.cuh"

namespace pagedattn::cuda {

namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Producer / consumer register budgets (setmaxnreg; multiples of 8). setmaxnreg.inc takes
// its registers from the CTA's pool, which is the launch allocation: 384 threads x 168
// (launch_bounds(384, 1); cuobjdump -res-usage: REG:168) = 64512, not the SM's 65536, and an
// inc the pool cannot serve blocks for ever. So 128 x P + 256 x C <= 64512: 56 / 224,
// 40 / 232 or 24 / 240 (32 / 240 would need 65536 and hang).
// PAGEDATTN_WS_PRODUCER_REGS sets P of the 16-bit caches' instances for a same-run A/B build
// (scripts/ab_bench.sh, NEW_CUDA_FLAGS); C is then the largest the pool allows. The fp8
// instances keep 56: their producer converts every element, and at 40 its head-64 loop
// spills (ptxas, sm_90a).
#ifndef PAGEDATTN_WS_PRODUCER_REGS
#define PAGEDATTN_WS_PRODUCER_REGS 56
#endif
constexpr int kLaunchRegs = 168;
template <bool F8>
constexpr int producer_regs() {
  return F8 ? 56 : PAGEDATTN_WS_PRODUCER_REGS;
}
template <bool F8>
constexpr int consumer_regs() {
  return (kLaunchRegs * kWsThreads - 128 * producer_regs<F8>()) / 256 / 8 * 8;
}
static_assert(PAGEDATTN_WS_PRODUCER_REGS % 8 == 0 && PAGEDATTN_WS_PRODUCER_REGS >= 24 &&
                  PAGEDATTN_WS_PRODUCER_REGS <= 96,
              "setmaxnreg takes multiples of 8 from 24; the consumers need the rest");
static_assert(consumer_regs<false>() <= 256 &&
                  128 * producer_regs<false>() + 256 * consumer_regs<false>() <=
                      kLaunchRegs * kWsThreads,
              "the consumers' inc must fit the CTA's register pool");

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// A box of the 4-D tensor map `tmap` (dims: head dim, token in block, kv head, block) at the
// given coordinates into shared memory at `dst`, its bytes completing on barrier `bar`.
__device__ __forceinline__ void tma_load_4d(std::uint32_t dst, const CUtensorMap* tmap, int c0,
                                            int c1, int c2, int c3, std::uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<std::uint64_t>(tmap)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}
// Eight fp8 codes (cache kind KV; bytes 0..3 of raw.x, then raw.y) as eight T values, two per
// word, the first in the low half. Exact: fp8 -> fp16 always; for bf16 through fp32, exact
// since an fp8 value has at most 4 significant bits and an exponent inside bf16's range.
template <class T, int KV>
__device__ __forceinline__ void fp8x8_to_16bit(const uint2& raw, uint4* out) {
  const std::uint32_t in[2] = {raw.x, raw.y};
  std::uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const auto two = static_cast<__nv_fp8x2_storage_t>((in[i >> 1] >> (16 * (i & 1))) & 0xFFFFu);
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(two, KV == kKvE4M3 ? __NV_E4M3 : __NV_E5M2);
    if constexpr (std::is_same<T, __half>::value) {
      w[i] = static_cast<std::uint32_t>(h.x) | (static_cast<std::uint32_t>(h.y) << 16);
    } else {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
      const __nv_bfloat162 b = __floats2bfloat162_rn(f.x, f.y);
      w[i] = *reinterpret_cast<const std::uint32_t*>(&b);
    }
  }
  *out = make_uint4(w[0], w[1], w[2], w[3]);
}
template <int R>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
}
template <int R>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
}
#endif

// TMA: whether the producer may issue TMA boxes (tma_box > 0). The cp.async-only instance has
// none of their bookkeeping, so its registers are those of the gather alone. The consumers
// keep P_{j-1} live through the softmax of S_j (the overlap), which costs head 128 a few
// spilled words (measured: still as fast as without the overlap, and head 256 13% faster).
// MASKED: a masked head (WgParams::head_size below HEAD) runs on this instance; measured on an
// H200 with the masking at run time in every instance, head 256 lost about 3% on the chunked
// shape, so the exact heads' instances have none of it.
// KV: kKvSame (the cache holds T), or an fp8 cache (kKvE4M3 / kKvE5M2): the producer loads its
// rows into registers, converts them exactly to T (every fp8 value is an fp16 value, and one
// of at most 4 significant bits and a small exponent is a bf16 value too) and stores them in
// the slots' layout, so the consumers are the 16-bit instance's; k_scale multiplies the
// logits (folded into the softmax scale) and v_scale the output (folded into 1 / l).
// SPLIT: vLLM's split layout (key [block, kv head, head / 8, token, 8], value [block, kv head,
// dim, token]; block_size a multiple of 8). The key rows are gathered as in the other layouts
// (16 bytes are one token's 8 dims; the chunk stride is a parameter). The value tile is kept
// transposed, V^T [dim][token], 16-byte chunks of 8 tokens of one dim (one block's, as
// block_size is a multiple of 8), which is K-major for the PV GEMM (no transpose bit).
template <class T, int HEAD, int TOK, int STAGES, bool TMA, bool MASKED, int KV,
          bool SPLIT>
__global__ void __launch_bounds__(kWsThreads, 1)
    prefill_ws_kernel(const WgParams p, const __grid_constant__ CUtensorMap tm_k,
                      const __grid_constant__ CUtensorMap tm_v, const int tma_box) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr bool F8 = KV != kKvSame;
  static_assert(!(F8 && TMA), "fp8 rows change bytes on the way: no TMA boxes");
  static_assert(!(SPLIT && TMA), "the split layout's pages are no TMA boxes of this tile");
  static_assert(!(F8 && SPLIT), "fp8 caches in the split layout have no instance");
  constexpr int ROWS = kWgmmaRowsPerCta;
  // The problem's head: HEAD itself, or (MASKED) a smaller multiple of 8 whose dims past it
  // are zero in shared memory and not stored (prefill_ws_instance_head). The exact heads'
  // instances carry no masking code.
  const int head_size = MASKED ? p.head_size : HEAD;
  constexpr int CH = HEAD / 8;       // 16-byte chunks per row
  constexpr int TILE = TOK * HEAD;   // elements of one K or V tile
  constexpr int KSTEPS = HEAD / 16;  // k-steps of S = Q K^T
  constexpr int PSTEPS = TOK / 16;   // k-steps of O += P V
  static_assert(ROWS == 128 && kWsThreads == 384, "1 producer + 2 consumer warpgroups");
  static_assert(TOK == 64 || TOK == 128, "key tiles: the N of one wgmma");
  static_assert(CH <= 32 && 32 % CH == 0, "a warp copies whole rows");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char* smem_al = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<std::uintptr_t>(smem_raw) + 1023) & ~std::uintptr_t{1023});
  T* sQ = reinterpret_cast<T*>(smem_al);
  T* sK = sQ + ROWS * HEAD;
  T* sV = sK + STAGES * TILE;
  // mbarriers: full K, full V, empty K, empty V, STAGES each
  std::uint64_t* bars = reinterpret_cast<std::uint64_t*>(sV + STAGES * TILE);
  const std::uint32_t bar0 = smem_addr(bars);
  auto full_k = [&](int s) { return bar0 + 8u * s; };
  auto full_v = [&](int s) { return bar0 + 8u * (STAGES + s); };
  auto empty_k = [&](int s) { return bar0 + 8u * (2 * STAGES + s); };
  auto empty_v = [&](int s) { return bar0 + 8u * (3 * STAGES + s); };

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
  const int tb = static_cast<int>(row0 / G);
  const int rem = static_cast<int>(row0 - static_cast<std::int64_t>(tb) * G);
  const int nvalid = nrows - row0 < ROWS ? static_cast<int>(nrows - row0) : ROWS;
  const int pos_first = len - ql + tb;
  const int pos_last = pos_first + (rem + nvalid - 1) / G;
  const std::int64_t win_lo = std::int64_t{pos_first} - p.window + 1;
  const int kv_lo = p.window > 0 && win_lo > 0 ? static_cast<int>(win_lo) : 0;
  const int kv_hi = min(len, pos_last + 1);
  const int start = kv_lo & ~(TOK - 1);
  const int ntiles = kv_hi > kv_lo ? (kv_hi - start + TOK - 1) / TOK : 0;

  const int tid = threadIdx.x, lane = tid & 31;
  if (tid == 0) {
    for (int st = 0; st < STAGES; ++st) {
      mbar_init(full_k(st), 128);
      mbar_init(full_v(st), 128);
      mbar_init(empty_k(st), 8);
      mbar_init(empty_v(st), 8);
    }
    // The initialised barriers visible to the async proxy (TMA's complete_tx) too.
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();  // barriers initialised before anyone arrives or waits
  if (tid < 128) {
    // ================= producer =================
    setmaxnreg_dec<producer_regs<F8>()>();
    constexpr int RPW = TOK / 4;   // tile rows per producer warp
    constexpr int RPP = 32 / CH;   // rows per copy pass of a warp
    constexpr int PASSES = RPW / RPP;
    const int pw = tid >> 5;
    const int* bt = p.block_table + static_cast<std::int64_t>(s) * p.bt_seq;
    const int bs = p.block_size;
    const T* kbase = static_cast<const T*>(p.k) + static_cast<std::int64_t>(g) * p.k_head;
    const T* vbase = static_cast<const T*>(p.v) + static_cast<std::int64_t>(g) * p.v_head;
    // fp8 caches: the same element strides over bytes.
    const unsigned char* kbase8 =
        static_cast<const unsigned char*>(p.k) + static_cast<std::int64_t>(g) * p.k_head;
    const unsigned char* vbase8 =
        static_cast<const unsigned char*>(p.v) + static_cast<std::int64_t>(g) * p.v_head;
    const int c = lane % CH;
    const bool c_in_head = c * 8 < head_size;  // masked heads: zero-fill the chunks past it
    const bool no_copy = (p.debug_flags & 4) != 0;
    const int box = TMA && !no_copy ? tma_box : 0;
    if (box > 0 && tid == 0) {
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<std::uint64_t>(&tm_k)) : "memory");
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<std::uint64_t>(&tm_v)) : "memory");
    }
    for (int it = 0; it < ntiles; ++it) {
      const int st = it % STAGES;
      const int use = it / STAGES;
      const int t0 = start + it * TOK;
      // Tile rows [r_lo, r_hi) come by TMA: the page segments of `box` tokens wholly inside
      // [kv_lo, kv_hi) (tiles start at multiples of TOK, so segments are page-aligned).
      int r_lo = 0, r_hi = 0, nseg = 0;
      if constexpr (TMA) {
        if (box > 0) {
          const int seg_lo = kv_lo > t0 ? (kv_lo - t0 + box - 1) / box : 0;
          const int seg_hi = kv_hi - t0 >= TOK ? TOK / box : (kv_hi - t0) / box;
          if (seg_hi > seg_lo) {
            r_lo = seg_lo * box;
            r_hi = seg_hi * box;
            nseg = seg_hi - seg_lo;
          }
        }
      }
      // Whether this warp has rows to gather by cp.async (warp-uniform).
      const bool warp_copies = !no_copy && (F8 || pw * RPW < r_lo || (pw + 1) * RPW > r_hi);
      // Lane l < RPW resolves row pw * RPW + l of the tile: block id (-1 = zero-fill: outside
      // [kv_lo, kv_hi), past the block-table row, or a block id outside the cache) and offset.
      int blk = -1, off = 0;
      if (warp_copies && lane < RPW) {
        const int t = t0 + pw * RPW + lane;
        if (t >= kv_lo && t < kv_hi) {
          const int lb = t / bs;
          const int b = lb < p.bt_width ? bt[static_cast<std::int64_t>(lb) * p.bt_blk] : -1;
          if (b >= 0 && b < p.num_blocks) {
            blk = b;
            off = t - lb * bs;
          }
        }
      }
      // The 4 producer warps share the segments (warp w: segments j = w, w + 4, ...; lane j / 4),
      // so their issue, serialised over the lanes of a warp, runs 4-wide. Each lane resolves its
      // segment for both K and V before the waits so that the block-table read overlaps them
      // (block id -1 past the block-table row, which the tensor map reads as zeros like any id
      // outside [0, num_blocks)).
      const int my_segs = nseg > pw ? (nseg - pw + 3) / 4 : 0;
      int tma_blk = -1, tma_off = 0;
      if (lane < my_segs) {
        const int t = t0 + r_lo + (lane * 4 + pw) * box;
        const int lb = t / bs;
        tma_blk = lb < p.bt_width ? bt[static_cast<std::int64_t>(lb) * p.bt_blk] : -1;
        tma_off = t - lb * bs;
      }
      auto copy = [&](const T* base, std::int64_t s_blk, std::int64_t s_tok, std::int64_t s_chunk,
                      T* dst) {
#pragma unroll 4
        for (int k = 0; k < PASSES; ++k) {
          const int rl = k * RPP + lane / CH;
          const int b = __shfl_sync(0xffffffffu, blk, rl);
          const int o = __shfl_sync(0xffffffffu, off, rl);
          const int row = pw * RPW + rl;
          if (row >= r_lo && row < r_hi) continue;  // this row comes by TMA
          const T* src = b >= 0 && c_in_head ? base + static_cast<std::int64_t>(b) * s_blk +
                                      static_cast<std::int64_t>(o) * s_tok +
                                      static_cast<std::int64_t>(c) * s_chunk
                                : base;
          mma::cp_async16(smem_addr(dst + wgmma::tile_off(row, c, TOK)), src,
                          b >= 0 && c_in_head ? 16 : 0);
        }
      };
      // fp8: each lane loads its chunk's 8 codes of a row (8 bytes), converts them to T and
      // stores the 16-byte chunk; the loads of 4 rows are in flight before the first convert.
      auto copy_f8 = [&](const unsigned char* base, std::int64_t s_blk, std::int64_t s_tok,
                         std::int64_t s_chunk, T* dst) {
        // 8 rows' loads in flight per lane (16 registers; the shared stores take 32-bit
        // addresses, so the producer's 56 hold them).
        constexpr int BATCH = PASSES < 8 ? PASSES : 8;
#pragma unroll 1
        for (int k0 = 0; k0 < PASSES; k0 += BATCH) {
          uint2 raw[BATCH];
          int row[BATCH];
#pragma unroll
          for (int u = 0; u < BATCH; ++u) {
            const int rl = (k0 + u) * RPP + lane / CH;
            const int b = __shfl_sync(0xffffffffu, blk, rl);
            const int o = __shfl_sync(0xffffffffu, off, rl);
            row[u] = pw * RPW + rl;
            raw[u] = make_uint2(0u, 0u);
            if (b >= 0 && c_in_head)
              raw[u] = __ldg(reinterpret_cast<const uint2*>(
                  base + static_cast<std::int64_t>(b) * s_blk + static_cast<std::int64_t>(o) * s_tok +
                  static_cast<std::int64_t>(c) * s_chunk));
          }
#pragma unroll
          for (int u = 0; u < BATCH; ++u) {
            uint4 out;
            fp8x8_to_16bit<T, KV>(raw[u], &out);
            // st.shared with a 32-bit address: dst's address space is lost to the aligned
            // base's integer round trip, and a generic store costs 64-bit arithmetic.
            asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(
                             smem_addr(dst + wgmma::tile_off(row[u], c, TOK))),
                         "r"(out.x), "r"(out.y), "r"(out.z), "r"(out.w)
                         : "memory");
          }
        }
      };
      // Split layout, V^T: warp pw fills the TCW 8-token chunks of its RPW tokens for every
      // dim, lane l taking chunk l % TCW of dims l / TCW + k * (32 / TCW). A chunk's block is
      // that of its first key inside [kv_lo, kv_hi) (whose lane resolved it; the chunk is in
      // one block); its tokens from kv_hi on are zero-filled by the copy's source size, those
      // before kv_lo are the sequence's own (finite) and masked in the softmax.
      auto copy_vt = [&](const T* base, T* dst) {
        constexpr int TCW = RPW / 8;       // 8-token chunks per warp
        constexpr int DPP = 32 / TCW;      // dims per pass
        constexpr int VPASSES = HEAD / DPP;
        const int tc = lane % TCW;
        const int trow = pw * RPW + tc * 8;           // the chunk's first tile row
        const int tabs = t0 + trow;                   // ... and its key
        const int first = max(kv_lo, tabs);           // first key inside the range
        const int last = min(kv_hi, tabs + 8);        // one past the last
        const int src_lane = (first - t0) - pw * RPW; // the lane that resolved `first`
        const bool any = first < last;
        const int b = __shfl_sync(0xffffffffu, blk, any ? src_lane : 0);
        const int o = __shfl_sync(0xffffffffu, off, any ? src_lane : 0) - (first - tabs);
        const bool ok = any && b >= 0;
        const int bytes = ok ? (last - tabs) * 2 : 0;
#pragma unroll 4
        for (int k = 0; k < VPASSES; ++k) {
          const int d = lane / TCW + k * DPP;
          const bool dok = ok && d < head_size;
          const T* src = dok ? base + static_cast<std::int64_t>(b) * p.v_blk +
                                   static_cast<std::int64_t>(d) * p.v_dim + o
                             : base;
          mma::cp_async16(smem_addr(dst + wgmma::tile_off(d, trow / 8, HEAD)), src,
                          dok ? bytes : 0);
        }
      };
      // A warp announces its boxes' bytes before it issues them and before its lanes' cp.async
      // arrivals, so the phase (128 arrivals and the bytes) cannot complete without them.
      auto issue_tma = [&](const CUtensorMap* tm, T* dst, std::uint32_t bar) {
        if (my_segs == 0) return;
        if (lane == 0) mbar_expect_tx(bar, static_cast<std::uint32_t>(my_segs * box * HEAD * 2));
        __syncwarp();
        if (lane < my_segs) {
          const std::uint32_t d = smem_addr(dst) + (r_lo + (lane * 4 + pw) * box) * 128;
#pragma unroll
          for (int cg = 0; cg < HEAD / 64; ++cg)
            tma_load_4d(d + cg * TOK * 128, tm, cg * 64, tma_off, g, tma_blk, bar);
        }
      };
      if constexpr (F8) {
        // Plain stores, then one arrival (release: the consumers' acquire and their proxy
        // fence order the stores before the wgmmas), as the cp.async path's arrivals.
        // The writer-side proxy fence too (as CUTLASS and FlashAttention-3 do before they
        // commit producer-written shared memory), besides the consumers' after their wait.
        if (use > 0) mbar_wait(empty_k(st), (use - 1) & 1);
        if (!no_copy) copy_f8(kbase8, p.k_blk, p.k_tok, p.k_chunk, sK + st * TILE);
        wgmma::fence_proxy_async();
        mbar_arrive(full_k(st));
        if (use > 0) mbar_wait(empty_v(st), (use - 1) & 1);
        if (!no_copy) copy_f8(vbase8, p.v_blk, p.v_tok, p.v_chunk, sV + st * TILE);
        wgmma::fence_proxy_async();
        mbar_arrive(full_v(st));
      } else {
        if (use > 0) mbar_wait(empty_k(st), (use - 1) & 1);
        issue_tma(&tm_k, sK + st * TILE, full_k(st));
        if (warp_copies) copy(kbase, p.k_blk, p.k_tok, p.k_chunk, sK + st * TILE);
        if (no_copy) mbar_arrive(full_k(st)); else cp_async_arrive_noinc(full_k(st));
        if (use > 0) mbar_wait(empty_v(st), (use - 1) & 1);
        issue_tma(&tm_v, sV + st * TILE, full_v(st));
        if constexpr (SPLIT) {
          if (warp_copies) copy_vt(vbase, sV + st * TILE);
        } else {
          if (warp_copies) copy(vbase, p.v_blk, p.v_tok, p.v_chunk, sV + st * TILE);
        }
        if (no_copy) mbar_arrive(full_v(st)); else cp_async_arrive_noinc(full_v(st));
      }
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");  // exit with nothing in flight
    return;
  }

  // ================= consumers =================
  setmaxnreg_inc<consumer_regs<F8>()>();
  // fp8: the KV head's scales (1 for 16-bit caches, where the products below fold away).
  const float k_mul = F8 ? cache_scale(p.k_scales, p.scales_stride, g, p.k_scale) : 1.f;
  const float v_mul = F8 ? cache_scale(p.v_scales, p.scales_stride, g, p.v_scale) : 1.f;
  const float scale_log2 = p.scale_log2 * k_mul;
  const float cap_arg = p.cap_arg * k_mul;
  const int cw = (tid >> 7) - 1;  // consumer 0 or 1
  const int ctid = tid & 127;
  const int wwarp = (tid >> 5) & 3;
  const int wrow0 = cw * 64;  // first CTA row of the warpgroup

  // The warpgroup's 64 query rows (zero past nvalid), visible to its async proxy.
#pragma unroll
  for (int k = 0; k < 64 * CH / 128; ++k) {
    const int i = ctid + k * 128;
    const int r = wrow0 + i / CH, cc = i % CH;
    const bool ok = r < nvalid && cc * 8 < head_size;  // zero past the rows and the head
    const T* src = static_cast<const T*>(p.q);
    if (ok) {
      const int rr = rem + r;
      const int tok = q0 + tb + rr / G;
      const int head = g * G + rr % G;
      src += static_cast<std::int64_t>(tok) * p.q_tok + static_cast<std::int64_t>(head) * p.q_head +
             cc * 8;
    }
    mma::cp_async16(smem_addr(sQ + wgmma::tile_off(r, cc, ROWS)), src, ok ? 16 : 0);
  }
  cp_async_commit();
  cp_async_wait<0>();
  wgmma::fence_proxy_async();
  named_sync(3 + cw, 128);

  int qpos[2];
  float slope[2], m_run[2], l_run[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = wrow0 + wwarp * 16 + (lane >> 2) + h * 8;
    const bool ok = r < nvalid;
    const int head = g * G + (rem + r) % G;
    // Rows past the sequence see nothing (all masked) and are never written.
    qpos[h] = ok ? pos_first + (rem + r) / G : -1;
    slope[h] = (ok && p.alibi != nullptr)
                   ? p.alibi[static_cast<std::int64_t>(head) * p.alibi_stride] * kLog2e
                   : 0.f;
    // A sink is one more logit in the denominator (its exp counted once per row, by the
    // quad's first thread). A sink of -inf is no sink.
    const bool sink = ok && p.sinks != nullptr;
    m_run[h] = sink ? p.sinks[static_cast<std::int64_t>(head) * p.sinks_stride] * kLog2e : -INFINITY;
    l_run[h] = (sink && m_run[h] != -INFINITY && (lane & 3) == 0) ? 1.f : 0.f;
  }
  float o[HEAD / 2];
#pragma unroll
  for (int i = 0; i < HEAD / 2; ++i) o[i] = 0.f;
  unsigned a[PSTEPS][4];  // P of the last softmaxed tile: the A operand of its PV GEMM
  float sc[TOK / 2];

  const std::uint32_t q_addr = smem_addr(sQ) + wrow0 * 128;
  const std::uint32_t k_addr0 = smem_addr(sK);
  const std::uint32_t v_addr0 = smem_addr(sV);
  const int wg_last = min(wrow0 + 63, nvalid - 1);
  const int wg_qlo = pos_first + (rem + wrow0) / G;
  const int my_turn = 1 + cw, other_turn = 2 - cw;
  // Turns for head 128 only. Head 256: its 2-stage rings leave the turn-taking waiting on loads
  // (measured on an H200: 336 TFLOP/s without, 282 with, on 4 x 2048 chunks ending 8192).
  // Head 64: its GEMMs are too short for the hand-over to pay (333 without, 324 with).
  const bool pingpong = HEAD == 128 && (p.debug_flags & 1) == 0;
  auto turn_sync = [&]() {
    if (pingpong) named_sync(my_turn, 256);
  };
  auto turn_arrive = [&](int id) {
    if (pingpong) named_arrive(id, 256);
  };

  auto issue_s = [&](int st) {
    const std::uint32_t k_addr = k_addr0 + st * (TILE * 2);
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) {
      const std::uint32_t kb = (ks >> 2) * (TOK * 128) + (ks & 3) * 32;
      const std::uint32_t qb = (ks >> 2) * (ROWS * 128) + (ks & 3) * 32;
      wgmma::ss<T, TOK>(sc, wgmma::desc(q_addr + qb, 16, 1024), wgmma::desc(k_addr + kb, 16, 1024),
                        ks > 0 ? 1 : 0);
    }
  };
  auto issue_pv = [&](int st) {
    const std::uint32_t v_addr = v_addr0 + st * (TILE * 2);
    if constexpr (SPLIT) {
      // V^T [HEAD rows][TOK keys], K-major: k-step kk is 32 bytes into column block kk / 4.
#pragma unroll
      for (int kk = 0; kk < PSTEPS; ++kk)
        wgmma::rs<T, HEAD, 0>(o, a[kk],
                              wgmma::desc(v_addr + (kk >> 2) * (HEAD * 128) + (kk & 3) * 32,
                                          16, 1024),
                              1);
    } else {
#pragma unroll
      for (int kk = 0; kk < PSTEPS; ++kk)
        wgmma::rs<T, HEAD, 1>(o, a[kk], wgmma::desc(v_addr + kk * 2048, TOK * 128, 1024), 1);
    }
  };
  // Softmax of the S accumulators of the tile at key t0: P (fp32) in place of S, the running
  // max and sum updated, and in corr the factor O must be rescaled by (MASK: causal / window
  // per element; a tile no row of the warpgroup sees gives P = 0 and leaves the state alone).
  // It touches neither O nor a[], so it runs while the previous tile's PV GEMM is in flight.
  auto softmax = [&](int t0, auto mask_tag, float (&corr)[2]) {
    constexpr bool MASK = decltype(mask_tag)::value;
    // Plain scores (no softcap, no ALiBi, scale > 0): the maximum of the raw scores, scaled
    // once, and exp2(s * scale - base) as one FMA per element; otherwise the logits first.
    const bool plain = p.softcap <= 0.f && p.alibi == nullptr && scale_log2 > 0.f;
    float mx[2] = {-INFINITY, -INFINITY};
    auto visible = [&](int i, int h) {
      const int j = t0 + (i >> 2) * 8 + 2 * (lane & 3) + (i & 1);
      return j <= qpos[h] && (p.window <= 0 || qpos[h] - j < p.window);
    };
    if (plain) {
#pragma unroll
      for (int i = 0; i < TOK / 2; ++i) {
        const int h = (i >> 1) & 1;
        if (MASK && !visible(i, h)) sc[i] = -INFINITY;
        mx[h] = fmaxf(mx[h], sc[i]);
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) mx[h] *= scale_log2;  // -inf stays -inf
    } else {
#pragma unroll
      for (int i = 0; i < TOK / 2; ++i) {
        const int h = (i >> 1) & 1;
        const int j = t0 + (i >> 2) * 8 + 2 * (lane & 3) + (i & 1);
        float z = p.softcap > 0.f ? p.cap_log2 * tanhf(sc[i] * cap_arg) : sc[i] * scale_log2;
        if (p.alibi != nullptr) z += slope[h] * static_cast<float>(j - qpos[h]);
        if (MASK && !visible(i, h)) z = -INFINITY;
        sc[i] = z;
        mx[h] = fmaxf(mx[h], z);
      }
    }
    float base[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
      const float m_new = fmaxf(m_run[h], mx[h]);
      // Exactly 1 where the maximum did not move (finish then skips the rescale).
      corr[h] = m_new == -INFINITY || m_new == m_run[h] ? 1.f : ex2(m_run[h] - m_new);
      m_run[h] = m_new;
      base[h] = softmax_base(m_new);
    }
    const float mul = plain ? scale_log2 : 1.f;
    float ps[2] = {0.f, 0.f};
#pragma unroll
    for (int i = 0; i < TOK / 2; ++i) {
      const int h = (i >> 1) & 1;
      const float pv = ex2(fmaf(sc[i], mul, -base[h]));
      sc[i] = pv;
      ps[h] += pv;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) l_run[h] = l_run[h] * corr[h] + ps[h];
  };
  // Once the previous PV GEMM completed: O rescaled and P packed into a[] (the next PV's A).
  // The rescale is skipped where no row of the warp changed its maximum (corr exactly 1, the
  // common case once a causal row's maximum settled): HEAD / 2 multiplies per thread and tile
  // (measured on an H200: head 256 +2%, head 128 unchanged).
  auto finish = [&](const float (&corr)[2]) {
    if (!__all_sync(0xffffffffu, corr[0] == 1.f && corr[1] == 1.f)) {
#pragma unroll
      for (int i = 0; i < HEAD / 2; ++i) o[i] *= corr[(i >> 1) & 1];
    }
#pragma unroll
    for (int kk = 0; kk < PSTEPS; ++kk) {
      a[kk][0] = mma::pack2<T>(sc[8 * kk + 0], sc[8 * kk + 1]);
      a[kk][1] = mma::pack2<T>(sc[8 * kk + 2], sc[8 * kk + 3]);
      a[kk][2] = mma::pack2<T>(sc[8 * kk + 4], sc[8 * kk + 5]);
      a[kk][3] = mma::pack2<T>(sc[8 * kk + 6], sc[8 * kk + 7]);
    }
  };
  auto softmax_tile = [&](int it, float (&corr)[2]) {
    if (p.debug_flags & 2) {  // diagnostics: the GEMMs and loads without the softmax (raw S as P)
      corr[0] = corr[1] = 1.f;
      return;
    }
    const int t0 = start + it * TOK;
    // Warpgroup-uniform: no mask where every key of the tile is visible to every row.
    const std::int64_t t_last = std::int64_t{t0} + TOK - 1;
    const int wg_qhi = pos_first + (rem + max(wg_last, wrow0)) / G;
    const bool full = wrow0 < nvalid && t_last <= wg_qlo &&
                      (p.window <= 0 || std::int64_t{t0} >= std::int64_t{wg_qhi} - p.window + 1);
    if (full)
      softmax(t0, std::false_type{}, corr);
    else
      softmax(t0, std::true_type{}, corr);
  };
  // Release this warp's hold on a slot (one arrival per warp; the warpgroup's wgmma group
  // that read it has completed).
  auto release = [&](std::uint32_t bar) {
    __syncwarp();
    if (lane == 0) mbar_arrive(bar);
  };

  if (ntiles > 0) {
    if (cw == 1) turn_arrive(1);  // consumer 0 takes the first turn
    // tile 0: S only
    mbar_wait(full_k(0), 0);
    wgmma::fence_proxy_async();
    turn_sync();
    wgmma::fence();
    issue_s(0);
    wgmma::commit();
    turn_arrive(other_turn);
    wgmma::wait<0>();
    wgmma::fence_operand(sc);
    release(empty_k(0));
    {
      float corr[2];
      softmax_tile(0, corr);
      finish(corr);
    }
    // Per tile: S_j and then PV_{j-1} as two wgmma groups; the softmax of S_j runs once the
    // first completes, overlapping the second (its O and P operands untouched until it did).
    for (int it = 1; it < ntiles; ++it) {
      const int st = it % STAGES, pst = (it - 1) % STAGES;
      mbar_wait(full_k(st), (it / STAGES) & 1);
      mbar_wait(full_v(pst), ((it - 1) / STAGES) & 1);
      wgmma::fence_proxy_async();
      turn_sync();
      wgmma::fence_operand(o);
      wgmma::fence();
      issue_s(st);
      wgmma::commit();
      issue_pv(pst);
      wgmma::commit();
      turn_arrive(other_turn);
      wgmma::wait<1>();
      wgmma::fence_operand(sc);
      release(empty_k(st));
      float corr[2];
      softmax_tile(it, corr);
      wgmma::wait<0>();
      wgmma::fence_operand(o);
      // a[] live until here: the in-flight PV read it, so its registers must not be reused.
#pragma unroll
      for (int kk = 0; kk < PSTEPS; ++kk)
#pragma unroll
        for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(a[kk][e])::"memory");
      release(empty_v(pst));
      finish(corr);
    }
    // the last PV
    const int pst = (ntiles - 1) % STAGES;
    mbar_wait(full_v(pst), ((ntiles - 1) / STAGES) & 1);
    wgmma::fence_proxy_async();
    turn_sync();
    wgmma::fence_operand(o);
    wgmma::fence();
    issue_pv(pst);
    wgmma::commit();
    if (cw == 0) turn_arrive(other_turn);  // consumer 1's last turn hands over nothing
    wgmma::wait<0>();
    wgmma::fence_operand(o);
    release(empty_v(pst));
  }
  if (wrow0 >= nvalid) return;

  // ---- epilogue: normalise and store (4-byte stores of column pairs)
  float inv[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
    inv[h] = l_run[h] != 0.f ? v_mul / l_run[h] : NAN;  // l = 0: 0/0, NaN as in the oracle
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
      if (8 * j < head_size)  // masked heads: only the head's dims
        *reinterpret_cast<unsigned*>(dst + 8 * j) =
            mma::pack2<T>(o[4 * j + 2 * h] * inv[h], o[4 * j + 2 * h + 1] * inv[h]);
    if (p.lse != nullptr && (lane & 3) == 0)
      p.lse[tok * p.l_tok + head * p.l_head] =
          l_run[h] != 0.f ? (softmax_base(m_run[h]) + log2f(l_run[h])) * kLn2 : NAN;
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // built without sm_90a features: fail loudly, never return garbage
#endif
}

// cuTensorMapEncodeTiled from the driver the runtime loaded (no link against libcuda); null
// when the driver has none.
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                         &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      f = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// What a cache's tensor map is made of: the base, its dims and element strides (as
// encode_cache_map names them) and the box's tokens.
struct CacheMapKey {
  const void* base;
  std::int64_t num_blocks, s_tok, s_head, s_blk;
  int head, block_size, num_kv_heads, box;
  bool operator==(const CacheMapKey& o) const {
    return base == o.base && num_blocks == o.num_blocks && s_tok == o.s_tok &&
           s_head == o.s_head && s_blk == o.s_blk && head == o.head &&
           block_size == o.block_size && num_kv_heads == o.num_kv_heads && box == o.box;
  }
};

// The 4-D tensor map of one cache (key or value) of 16-bit elements for boxes of 64 head dims x
// `box` tokens of one block and kv head, 128B-swizzled like the wgmma tiles. Dims, innermost
// first: head dim (head), token in block (block_size, stride s_tok elements), kv head
// (num_kv_heads, s_head), block (num_blocks, s_blk). False when the driver refuses it.
bool encode_cache_map(CUtensorMap* map, const CacheMapKey& k) {
  const PFN_cuTensorMapEncodeTiled_v12000 enc = tensor_map_encoder();
  if (enc == nullptr) return false;
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(k.head),
                              static_cast<cuuint64_t>(k.block_size),
                              static_cast<cuuint64_t>(k.num_kv_heads),
                              static_cast<cuuint64_t>(k.num_blocks)};
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(k.s_tok) * 2,
                                 static_cast<cuuint64_t>(k.s_head) * 2,
                                 static_cast<cuuint64_t>(k.s_blk) * 2};
  const cuuint32_t boxdim[4] = {64, static_cast<cuuint32_t>(k.box), 1, 1};
  const cuuint32_t estr[4] = {1, 1, 1, 1};
  return enc(map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 4, const_cast<void*>(k.base), dims, strides,
             boxdim, estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// encode_cache_map through the maps this thread encoded before: the encode is a driver call
// on every launch's host path, and an engine launches on the same caches step after step, one
// pair per layer when each layer has its own cache (a 4-entry round robin never hit with more
// than two layers). The map is a pure function of the key, so a hit is exact, and so is a
// refusal (remembered too: the launch then gathers by cp.async without asking the driver
// again); the table is emptied when it reaches kMaxEntries (caches reallocated many times),
// so it stays bounded.
bool cached_cache_map(CUtensorMap* map, const CacheMapKey& k) {
  struct KeyHash {
    std::size_t operator()(const CacheMapKey& c) const {
      std::uint64_t h = reinterpret_cast<std::uintptr_t>(c.base);
      for (std::int64_t v : {c.num_blocks, c.s_tok, c.s_head, c.s_blk,
                             std::int64_t{c.head} << 32 | std::uint32_t(c.block_size),
                             std::int64_t{c.num_kv_heads} << 32 | std::uint32_t(c.box)})
        h = (h ^ static_cast<std::uint64_t>(v)) * 0x100000001b3ULL;
      return static_cast<std::size_t>(h ^ (h >> 29));
    }
  };
  struct Encoded {
    CUtensorMap map;
    bool ok;
  };
  constexpr std::size_t kMaxEntries = 1024;
  thread_local std::unordered_map<CacheMapKey, Encoded, KeyHash> maps;
  auto it = maps.find(k);
  if (it == maps.end()) {
    if (maps.size() >= kMaxEntries) maps.clear();
    Encoded e{};
    e.ok = encode_cache_map(&e.map, k);
    it = maps.emplace(k, e).first;
  }
  if (it->second.ok) *map = it->second.map;
  return it->second.ok;
}

// Whether the caches of `p` can be read by TMA boxes: head dims contiguous (chunk stride 8),
// 16-byte aligned bases and byte strides below 2^40, block ids in int32 coordinates.
bool tma_strides_ok(const WgParams& p) {
  auto ok16 = [](std::int64_t elems) {
    return elems > 0 && (elems * 2) % 16 == 0 && elems * 2 < (std::int64_t{1} << 40);
  };
  auto aligned = [](const void* a) { return reinterpret_cast<std::uintptr_t>(a) % 16 == 0; };
  return p.k_chunk == 8 && p.v_chunk == 8 && aligned(p.k) && aligned(p.v) && ok16(p.k_tok) &&
         ok16(p.k_head) && ok16(p.k_blk) && ok16(p.v_tok) && ok16(p.v_head) && ok16(p.v_blk) &&
         p.num_blocks <= INT32_MAX;
}

template <class T, int HEAD, int KV>
Status launch(const WgParams& p, bool split, std::int64_t row_tiles, int num_kv_heads,
              cudaStream_t stream) {
  constexpr int TOK = prefill_ws_tile_tokens(HEAD);
  constexpr int STAGES = prefill_ws_stages(HEAD);
  const bool masked = p.head_size != HEAD;
  CUtensorMap tm_k{}, tm_v{};
  auto kernel = masked ? prefill_ws_kernel<T, HEAD, TOK, STAGES, false, true, KV, false>
                       : prefill_ws_kernel<T, HEAD, TOK, STAGES, false, false, KV, false>;
  int box = 0;
  if constexpr (KV == kKvSame) {
    if (split) {
      // The split layout's pages are no TMA boxes of this tile: the gather and the V^T copy.
      kernel = masked ? prefill_ws_kernel<T, HEAD, TOK, STAGES, false, true, KV, true>
                      : prefill_ws_kernel<T, HEAD, TOK, STAGES, false, false, KV, true>;
    } else {
      // TMA boxes where the geometry allows (diagnostic bit 8 keeps the cp.async gather for an
      // A/B); fp8 rows are converted on the way, so they never come by TMA.
      box = (p.debug_flags & 8) != 0 ? 0 : prefill_ws_tma_box(HEAD, p.block_size);
      if (box > 0 &&
          (!tma_strides_ok(p) ||
           !cached_cache_map(&tm_k, CacheMapKey{p.k, p.num_blocks, p.k_tok, p.k_head, p.k_blk,
                                                p.head_size, p.block_size, num_kv_heads, box}) ||
           !cached_cache_map(&tm_v, CacheMapKey{p.v, p.num_blocks, p.v_tok, p.v_head, p.v_blk,
                                                p.head_size, p.block_size, num_kv_heads, box})))
        box = 0;
      if (box > 0)
        kernel = masked ? prefill_ws_kernel<T, HEAD, TOK, STAGES, true, true, KV, false>
                        : prefill_ws_kernel<T, HEAD, TOK, STAGES, true, false, KV, false>;
    }
  } else if (split) {
    return Status(StatusCode::kInternal, "prefill_wgmma_ws: an fp8 cache in the split layout");
  }
  const int smem = static_cast<int>(prefill_ws_smem_bytes(HEAD, TOK, STAGES));
  // Per function and device, not a stream operation: legal during graph capture.
  PA_CUDA_RETURN(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
                 "prefill_wgmma_ws: cudaFuncSetAttribute");
  const dim3 grid(static_cast<unsigned>(row_tiles), static_cast<unsigned>(num_kv_heads));
  kernel<<<grid, kWsThreads, smem, stream>>>(p, tm_k, tm_v, box);
  PA_CUDA_RETURN(cudaGetLastError(), "prefill_wgmma_ws: kernel launch");
  return Status::Ok();
}

// The instances of one head: query dtype x cache kind.
template <int HEAD>
Status launch_head(const WgParams& p, bool bf16, DType cache, bool split, std::int64_t row_tiles,
                   int num_kv_heads, cudaStream_t st) {
  if (cache == DType::kFloat8E4M3)
    return bf16 ? launch<__nv_bfloat16, HEAD, kKvE4M3>(p, split, row_tiles, num_kv_heads, st)
                : launch<__half, HEAD, kKvE4M3>(p, split, row_tiles, num_kv_heads, st);
  if (cache == DType::kFloat8E5M2)
    return bf16 ? launch<__nv_bfloat16, HEAD, kKvE5M2>(p, split, row_tiles, num_kv_heads, st)
                : launch<__half, HEAD, kKvE5M2>(p, split, row_tiles, num_kv_heads, st);
  return bf16 ? launch<__nv_bfloat16, HEAD, kKvSame>(p, split, row_tiles, num_kv_heads, st)
              : launch<__half, HEAD, kKvSame>(p, split, row_tiles, num_kv_heads, st);
}

}  // namespace

Status prefill_ws_launch(const WgParams& params, int head, bool bf16, DType cache, bool split,
                         std::int64_t row_tiles, int num_kv_heads, void* stream) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  // Diagnostics only (see WgParams::debug_flags): read once per process.
  static const int debug_flags = [] {
    const char* e = std::getenv("PAGEDATTN_DEBUG_PREFILL_WS");
    return e != nullptr ? std::atoi(e) & 15 : 0;
  }();
  WgParams p = params;
  p.debug_flags = debug_flags;
  head = prefill_ws_instance_head(head);  // masked heads run on the next larger instance
  if (head == 64) return launch_head<64>(p, bf16, cache, split, row_tiles, num_kv_heads, st);
  if (head == 128) return launch_head<128>(p, bf16, cache, split, row_tiles, num_kv_heads, st);
  if (head == 256) return launch_head<256>(p, bf16, cache, split, row_tiles, num_kv_heads, st);
  return Status(StatusCode::kInternal, "prefill_wgmma_ws: head_size " + std::to_string(head));
}

}  // namespace pagedattn::cuda
