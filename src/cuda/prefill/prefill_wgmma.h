// The Hopper (sm_90a) warpgroup-MMA prefill kernel: host-only declarations and sizing rules
// (inline, so that selection, `explain` and the unit tests see one rule in every build).
//
// Design (this first version; see prefill_wgmma.cu):
//  - rows are (query token, query head) pairs of one (sequence, KV head), flattened with the
//    head fastest, as in prefill_mma.h; one CTA = 2 warpgroups = 128 consecutive rows, each
//    warpgroup owning 64 (the M of wgmma.m64nNk16), so every K/V byte staged serves 128 rows;
//  - the query tile is staged once in shared memory; K/V tiles of 128 tokens move HBM ->
//    shared memory with 16-byte cp.async gathered token by token through the block table
//    (any block size, padded pages), in a 2-3 stage pipeline; every tile is 128B-swizzled so
//    that wgmma reads it through a descriptor;
//  - S = Q K^T: wgmma with both operands in shared memory, fp32 accumulators; online softmax
//    (exp2) in registers; P converted to fp16/bf16 in registers is the A operand of
//    O += P V (wgmma with V read N-major from the same token-row tiles);
//  - causal / window tile skipping per warpgroup, per-element masks on edge tiles only;
//    softcap, ALiBi, sinks and LSE as in prefill_mma;
//  - CTA -> (sequence, row tile) from device prefix sums (no host sync, graph-capturable), no
//    split-KV and no atomics: deterministic.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "pagedattn/attention.h"
#include "pagedattn/kv_cache.h"
#include "pagedattn/select.h"
#include "pagedattn/tensor.h"
#include "src/cuda/common/mma_args.h"
#include "src/cuda/tiled/cuda_config.h"

namespace pagedattn::cuda {

/// Rows ((query token, query head) pairs) per CTA, threads.
inline constexpr int kWgmmaRowsPerCta = 128;
inline constexpr int kWgmmaThreads = 256;

/// KV tokens per pipeline stage (the N of S = Q K^T): 128, or 64 for head 256 (whose O
/// accumulators take twice the registers).
constexpr int prefill_wgmma_tile_tokens(int head_size) { return head_size >= 256 ? 64 : 128; }

/// Pipeline stages for a head size (what fits one CTA per SM in 227 KB).
constexpr int prefill_wgmma_stages(int head_size) { return head_size <= 64 ? 3 : 2; }

/// Dynamic shared memory of one CTA in bytes: the query tile (128 rows x head_size 16-bit
/// elements), `stages` K and V tiles of prefill_wgmma_tile_tokens tokens, the block id and
/// in-block offset (2 x int32) of every tile token per stage, and 1024 bytes to align the
/// swizzled tiles.
constexpr std::int64_t prefill_wgmma_smem_bytes(int head_size, int tile_tokens, int stages) {
  const std::int64_t tile = std::int64_t{tile_tokens} * head_size * 2;
  const std::int64_t q = std::int64_t{kWgmmaRowsPerCta} * head_size * 2;
  return 1024 + q + stages * (2 * tile + std::int64_t{tile_tokens} * 8);
}
constexpr std::int64_t prefill_wgmma_smem_bytes(int head_size) {
  return prefill_wgmma_smem_bytes(head_size, prefill_wgmma_tile_tokens(head_size),
                                  prefill_wgmma_stages(head_size));
}

/// The warp-specialised version (prefill_wgmma_ws.cu, the default): one producer warpgroup
/// gathers K and V tiles into separate rings of shared-memory stages (cp.async completing on
/// mbarriers), two consumer warpgroups of 64 rows each wait on the full barriers, release
/// stages on the empty ones, and take turns (named barriers) issuing their GEMMs so that one
/// warpgroup's softmax runs under the other's tensor-core work.
inline constexpr int kWsThreads = 384;
/// KV tokens per stage: as the first version.
constexpr int prefill_ws_tile_tokens(int head_size) { return prefill_wgmma_tile_tokens(head_size); }
/// The head size of the warp-specialised instance that runs a problem of `head_size` (0:
/// none). 64, 128 and 256 run on their own instance; every other multiple of 8 up to 256 runs
/// masked on the next larger of them: the query's and the cache's dims past head_size are zero
/// in shared memory (the cache rows are read only up to the head: cp.async zero-fills the
/// chunks past it, and a TMA box's dims past the tensor map's head dim read as zeros), so the
/// k-steps past the head add zeros to S and the PV columns past it are 0 and not stored. The
/// GEMMs then do instance / head_size times the head's work; the rest of the kernel is the
/// instance's.
constexpr int prefill_ws_instance_head(int head_size) {
  if (head_size <= 0 || head_size % 8 != 0 || head_size > 256) return 0;
  return head_size <= 64 ? 64 : head_size <= 128 ? 128 : 256;
}
/// Tokens of one TMA box (one page segment of a key tile) of the warp-specialised kernel for
/// `block_size`, or 0 when its K/V tiles are gathered by cp.async only: pages must be a multiple
/// of 8 tokens (each box starts a 1024-byte swizzle atom) and either divide the tile or be a
/// multiple of it, so that every segment of a tile lies in one page. The launch also needs
/// 16-byte strides and aligned caches (else it gathers by cp.async).
constexpr int prefill_ws_tma_box(int head_size, int block_size) {
  const int tok = prefill_ws_tile_tokens(head_size);
  if (block_size <= 0 || block_size % 8 != 0) return 0;
  if (block_size <= tok) return tok % block_size == 0 ? block_size : 0;
  return block_size % tok == 0 ? tok : 0;
}
/// Stages of each of the K and V rings (what fits 227 KB with the query tile).
constexpr int prefill_ws_stages(int head_size) {
  return head_size <= 64 ? 5 : head_size <= 128 ? 3 : 2;
}
/// Dynamic shared memory of one warp-specialised CTA in bytes: the query tile, `stages` K and
/// V tiles, 1024 bytes of alignment and 256 for the mbarriers.
constexpr std::int64_t prefill_ws_smem_bytes(int head_size, int tile_tokens, int stages) {
  const std::int64_t tile = std::int64_t{tile_tokens} * head_size * 2;
  const std::int64_t q = std::int64_t{kWgmmaRowsPerCta} * head_size * 2;
  return 1024 + q + stages * 2 * tile + 256;
}
constexpr std::int64_t prefill_ws_smem_bytes(int head_size) {
  return prefill_ws_smem_bytes(head_size, prefill_ws_tile_tokens(head_size),
                               prefill_ws_stages(head_size));
}

/// Whether the wgmma prefill kernel can run the prefill rows of `problem` on `device`; when
/// not, `why_not` (if non-null) receives the reason for `explain`. Needs: a CUDA device of
/// compute capability 9.0 (the kernel is built for sm_90a only), at least one prefill chunk,
/// query fp16 or bf16 and the cache of the same dtype or (warp-specialised only) fp8 e4m3 /
/// e5m2, which its producer converts exactly to the query's dtype in shared memory (no TMA for
/// it), a head_size with an instance (warp-specialised:
/// every multiple of 8 up to 256, prefill_ws_instance_head; `warp_specialized` false, the first
/// version: 64, 128 or 256 only), the nhd or hnd layout, or (warp-specialised only) the split
/// layout with block_size a multiple of 8 (prefill_mma takes the others), num_kv_heads <=
/// 65535 and the version's shared memory
/// (prefill_ws_smem_bytes of the instance, or prefill_wgmma_smem_bytes). Every GQA ratio,
/// block size, window, softcap, ALiBi, sinks and LSE output. Stride and pointer alignment: as
/// prefill_mma (prefill_mma_aligned_strides at plan time, prefill_mma_aligned at run time).
inline bool prefill_wgmma_supported(const ProblemDesc& pr, const DeviceInfo& device,
                                    std::string* why_not, bool warp_specialized = true) {
  auto no = [&](std::string why) {
    if (why_not) *why_not = std::move(why);
    return false;
  };
  if (pr.device.type != DeviceType::kCUDA) return no("not a CUDA device");
  if (device.cc_major != 9 || device.cc_minor != 0)
    return no("compute capability " + std::to_string(device.cc_major) + "." +
              std::to_string(device.cc_minor) + " is not 9.0 (the kernel is built for sm_90a)");
  if (pr.batch.num_prefill_seqs == 0) return no("the batch has no prefill chunks");
  if (pr.q_dtype != DType::kFloat16 && pr.q_dtype != DType::kBFloat16)
    return no("query dtype is not fp16/bf16");
  const bool fp8 = is_fp8(pr.cache_dtype);
  if (fp8 && !warp_specialized)
    return no("fp8 cache (the first version has none; the warp-specialised one converts it)");
  if (!fp8 && pr.cache_dtype != pr.q_dtype)
    return no("cache dtype differs from the query dtype");
  const int instance = prefill_ws_instance_head(pr.head_size);
  if (warp_specialized && instance == 0)
    return no("head_size " + std::to_string(pr.head_size) +
              " is not a multiple of 8 up to 256");
  if (!warp_specialized && pr.head_size != 64 && pr.head_size != 128 && pr.head_size != 256)
    return no("head_size is not 64, 128 or 256 (the first version has no masked heads)");
  if (pr.layout == KVLayout::kSplit && !warp_specialized)
    return no("split layout (the first version has none; the warp-specialised one does)");
  if (pr.layout == KVLayout::kSplit && pr.block_size % 8 != 0)
    return no("split layout with block_size " + std::to_string(pr.block_size) +
              " (its value tile takes 8-token chunks of one block: a multiple of 8)");
  if (pr.layout == KVLayout::kSplit && fp8)
    return no("fp8 cache in the split layout (the producer converts token rows; the split "
              "layout's value pages are dim rows)");
  if (pr.num_kv_heads > 65535) return no("more than 65535 KV heads");
  const std::int64_t smem = warp_specialized ? prefill_ws_smem_bytes(instance)
                                             : prefill_wgmma_smem_bytes(pr.head_size);
  if (smem > device.max_shared_memory_per_block)
    return no("shared memory limit below " + std::to_string(smem) + " bytes");
  return true;
}

/// Row tiles (CTAs per KV head) of a batch from host metadata: the sum over sequences with
/// query_len >= max(1, min_query_len) of ceil(query_len * gqa / 128). `query_start_loc` is
/// int32 [num_seqs + 1] with element stride `stride`.
inline std::int64_t prefill_wgmma_row_tiles(const std::int32_t* query_start_loc,
                                            std::int64_t stride, int num_seqs, int gqa,
                                            int min_query_len) {
  return count_row_tiles(query_start_loc, stride, num_seqs, kWgmmaRowsPerCta, min_query_len, gqa);
}

/// Launch the prefix-sum kernel and the wgmma prefill kernel on `stream` for the rows of
/// sequences with query_len >= min_query_len (2: decode rows left to the decode fast path;
/// 1: every row). `row_tiles` = prefill_wgmma_row_tiles(host metadata, gqa, min_query_len);
/// `workspace` holds at least (num_seqs + 1) int32, 4-byte aligned. Arguments validated,
/// supported (prefill_wgmma_supported) and aligned (prefill_mma_aligned); no allocation, no
/// synchronisation. Errors: kUnsupported for a grid above 2^31 - 1 CTAs, kInternal for CUDA
/// launch errors. `warp_specialized`: the producer/consumer kernel (prefill_ws_*), else the
/// first version (PlanOptions::wgmma_prefill_v1).
Status prefill_wgmma_run(const AttentionArgs& args, int block_size, std::int64_t row_tiles,
                         int min_query_len, void* workspace, Stream stream,
                         bool warp_specialized);

}  // namespace pagedattn::cuda
