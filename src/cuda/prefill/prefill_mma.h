// The CUDA tensor-core prefill kernel (the prefill rows of KernelId::kCudaTiled plans with
// KernelChoice::prefill_rows_mma): host-only declarations and sizing rules, so that selection,
// `explain` and the unit tests see one rule in every build (the rules are inline; only the
// launcher needs the CUDA backend).
//
// Design (FlashAttention-2 structure):
//  - rows are (query token, query head) pairs of one (sequence, KV head), flattened with the
//    head fastest: row r of a sequence is query token r / gqa, query head
//    kv_head * gqa + r % gqa. One CTA = 4 warps = 64 consecutive rows, so every K/V byte a CTA
//    stages in shared memory serves the whole GQA group, whatever the ratio;
//  - each warp owns 16 rows (the M of an m16n8k16 MMA), keeps its query fragments in registers
//    and runs an online softmax over 64-token K/V tiles: S = Q K^T and O += P V on tensor cores
//    with fp32 accumulation; P goes from the S accumulator fragment straight to the A operand;
//  - K/V tiles move HBM -> shared memory with 16-byte cp.async in a multi-stage pipeline
//    (masked tokens are zero-filled, never read); each token maps to
//    (block_table[t / block_size], t % block_size), so tile size is independent of block size
//    and padded pages cost nothing (block stride at run time);
//  - only key tiles that some row of the CTA can see are visited (causal and window), per-warp
//    tiles no row of the warp sees are skipped, and the per-element mask is applied only on
//    tiles that cut a row's causal or window edge;
//  - the CTA -> (sequence, row tile) map is computed on the device from query_start_loc
//    (prefix sums of ceil(query_len * gqa / 64)), so a run needs no host synchronisation and
//    can be captured in a CUDA graph; there is no split-KV and no atomic: deterministic.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "pagedattn/attention.h"
#include "pagedattn/kv_cache.h"
#include "pagedattn/select.h"
#include "src/cuda/common/mma_args.h"
#include "src/cuda/tiled/cuda_config.h"

namespace pagedattn::cuda {

/// Rows ((query token, query head) pairs) per CTA, KV tokens per pipeline stage, threads.
inline constexpr int kPrefillRowsPerCta = 64;
inline constexpr int kPrefillTileTokens = 64;
inline constexpr int kPrefillThreads = 128;

/// Pipeline stages the kernel prefers for a head size: enough bytes in flight per CTA while
/// two (head 128) or three (head 64) CTAs still share one SM's shared memory.
inline int prefill_mma_preferred_stages(int head_size) { return head_size <= 64 ? 4 : 3; }

/// Dynamic shared memory of one CTA in bytes: `stages` K and V tiles of 64 tokens x head_size
/// 16-bit elements (the query tile is staged in the last stage's K tile before that stage is
/// first used), plus the block id and in-block offset (2 x int32) of every tile token per stage.
inline std::int64_t prefill_mma_smem_bytes(int head_size, int stages) {
  const std::int64_t tile = std::int64_t{kPrefillTileTokens} * head_size * 2;
  return stages * (2 * tile + std::int64_t{kPrefillTileTokens} * 8);
}

/// The number of stages for a device whose opt-in shared memory per block is
/// `max_shared_memory` bytes: the preferred count when it fits, else 2 when that fits, else 0
/// (the kernel cannot run there).
inline int prefill_mma_stages(int head_size, std::int64_t max_shared_memory) {
  const int preferred = prefill_mma_preferred_stages(head_size);
  if (prefill_mma_smem_bytes(head_size, preferred) <= max_shared_memory) return preferred;
  if (prefill_mma_smem_bytes(head_size, 2) <= max_shared_memory) return 2;
  return 0;
}

/// Whether the prefill kernel can run the prefill rows of `problem` on a device with
/// `max_shared_memory` bytes of opt-in shared memory per block; when not, `why_not` (if
/// non-null) receives the reason for `explain`. Needs: CUDA, at least one prefill chunk, query
/// and cache fp16 or bf16 of one dtype (fp8 caches keep the tiled kernel), head_size 64 or 128,
/// for the split layout block_size % 8 == 0 (8-token value chunks must not cross a block),
/// num_kv_heads <= 65535 (grid), and two pipeline stages in shared memory. Every GQA ratio,
/// window, softcap, ALiBi, sinks and LSE output are supported. Stride and pointer alignment is
/// checked per call (prefill_mma_aligned_strides at plan time, prefill_mma_aligned at run time).
inline bool prefill_mma_supported(const ProblemDesc& pr, std::int64_t max_shared_memory,
                                  std::string* why_not) {
  auto no = [&](std::string why) {
    if (why_not) *why_not = std::move(why);
    return false;
  };
  if (pr.device.type != DeviceType::kCUDA) return no("not a CUDA device");
  if (pr.batch.num_prefill_seqs == 0) return no("the batch has no prefill chunks");
  if (pr.q_dtype != DType::kFloat16 && pr.q_dtype != DType::kBFloat16)
    return no("query dtype is not fp16/bf16");
  if (pr.cache_dtype != pr.q_dtype) return no("cache dtype differs from the query dtype");
  if (pr.head_size != 64 && pr.head_size != 128) return no("head_size is not 64 or 128");
  if (pr.layout == KVLayout::kSplit && pr.block_size % 8 != 0)
    return no("split layout with block_size % 8 != 0");
  if (pr.num_kv_heads > 65535) return no("more than 65535 KV heads");
  if (prefill_mma_stages(pr.head_size, max_shared_memory) == 0)
    return no("shared memory limit below " +
              std::to_string(prefill_mma_smem_bytes(pr.head_size, 2)) + " bytes");
  return true;
}

/// Row tiles (CTAs per KV head) of a batch from host metadata: the sum over sequences with
/// query_len >= max(1, min_query_len) of ceil(query_len * gqa / 64). `query_start_loc` is
/// int32 [num_seqs + 1] with element stride `stride`. min_query_len 2 leaves the decode rows
/// to the decode fast path.
inline std::int64_t prefill_mma_row_tiles(const std::int32_t* query_start_loc,
                                          std::int64_t stride, int num_seqs, int gqa,
                                          int min_query_len) {
  return count_row_tiles(query_start_loc, stride, num_seqs, kPrefillRowsPerCta, min_query_len, gqa);
}

/// Workspace bytes of a run: the per-sequence row-tile prefix sums (int32 [num_seqs + 1]).
inline std::size_t prefill_mma_workspace(int num_seqs) {
  return (static_cast<std::size_t>(num_seqs) + 1) * sizeof(std::int32_t);
}

/// True when every stride (except the innermost) of the query, output and both caches is a
/// multiple of 8 elements, as 16-byte cp.async and 16-byte output stores need (plan time).
inline bool prefill_mma_aligned_strides(const AttentionArgs& args) {
  return mma_copy_aligned_strides(args);
}
/// prefill_mma_aligned_strides and 16-byte aligned base pointers of those tensors (run time;
/// an unaligned call takes the planned tiled kernel for every row).
inline bool prefill_mma_aligned(const AttentionArgs& args) {
  return mma_copy_aligned_pointers(args) && prefill_mma_aligned_strides(args);
}

/// Launch the prefix-sum kernel and the prefill kernel on `stream` for the rows of sequences
/// with query_len >= min_query_len (2: decode rows are left to the decode fast path; 1: every
/// row). `row_tiles` = prefill_mma_row_tiles(host metadata, gqa, min_query_len) (the grid);
/// `stages` = prefill_mma_stages(head_size, device limit); `workspace` holds at least
/// prefill_mma_workspace(num_seqs) bytes, 4-byte aligned. Arguments validated, matching the
/// plan and prefill_mma_aligned; no allocation, no synchronisation. Errors: kUnsupported for a
/// grid above 2^31 - 1 CTAs, kInternal for CUDA launch errors.
Status prefill_mma_run(const AttentionArgs& args, int block_size, int stages,
                       std::int64_t row_tiles, int min_query_len, void* workspace, Stream stream);

}  // namespace pagedattn::cuda
