// The CUDA half of select_kernel (DESIGN.md §3): which CUDA kernel runs a problem on a device
// described by its DeviceInfo. Host code in every build, with or without the CUDA backend, so
// that `pagedattn explain --assume-device h200` and the unit tests get the same decision on a
// machine without a GPU (it reads only the problem, the device facts and the options).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "src/cuda/backend/cuda_backend.h"
#include "src/cuda/backend/side_stream.h"
#include "src/cuda/decode/decode_mma.h"
#include "src/cuda/prefill/prefill_mma.h"
#include "src/cuda/prefill/prefill_wgmma.h"
#include "src/cuda/tiled/cuda_config.h"

namespace pagedattn::cuda {

namespace {

// How a mixed batch orders its decode and prefill kernels (mixed_concurrent_mode).
std::string mixed_order_note(int mode) {
  // "Where the call allows": a call whose tensors fall back to the tiled kernel, or whose
  // second stream still belongs to another open capture, runs the two serially.
  if (mode == 1)
    return ", concurrently with the prefill kernel where the call allows (its rows on a second "
           "stream forked from the call's stream, enqueued first, and joined back before the "
           "call returns; PAGEDATTN_MIXED_CONCURRENT=1)";
  if (mode == 2)
    return ", concurrently with the prefill kernel where the call allows (the decode rows on a "
           "second stream forked from the call's stream, enqueued first, and joined back before "
           "the call returns; this is the default, and PAGEDATTN_MIXED_CONCURRENT=0 runs the two "
           "serially)";
  return ", before the prefill kernel on the call's stream (PAGEDATTN_MIXED_CONCURRENT=0; "
         "unset or 2 runs the two concurrently)";
}

/// What `explain` says about how the warp-specialised prefill kernel's producer loads K and V
/// for a page of `block_size` tokens (prefill_ws_tma_box).
std::string ws_loader_note(int head, int block_size, DType cache, KVLayout layout) {
  if (is_fp8(cache))
    return std::string(to_string(cache)) + " rows loaded by the producer into registers (8 "
           "codes per lane), converted exactly to the query's dtype and stored into the "
           "slots (no TMA: the bytes change on the way), completing on mbarriers; k_scale in "
           "the softmax scale, v_scale in the final 1 / l (per KV head with scale tensors)";
  if (layout == KVLayout::kSplit)
    return "split layout: the key rows by 16-byte cp.async (16 bytes are one token's 8 dims), "
           "the value tile kept transposed (V^T, 16-byte chunks of 8 tokens of one dim, read "
           "K-major by the PV GEMM), both through the block table completing on mbarriers; no "
           "TMA boxes";
  const int box = prefill_ws_tma_box(head, block_size);
  const int tok = prefill_ws_tile_tokens(head);
  if (box > 0)
    return "TMA boxes of " + std::to_string(box) + " tokens x 64 dims for every page segment "
           "of a tile inside the chunk's key range (block_size " + std::to_string(block_size) +
           (block_size <= tok ? " divides the " : " is a multiple of the ") +
           std::to_string(tok) + "-token tile), the partial first and last segments by 16-byte "
           "cp.async, all completing on mbarriers; cp.async only if the caches' strides or "
           "bases are not 16-byte aligned";
  return "16-byte cp.async through the block table completing on mbarriers: no TMA boxes, as "
         "block_size " + std::to_string(block_size) +
         (block_size % 8 != 0 ? " is not a multiple of 8 (a box starts a 1024-byte swizzle atom)"
                              : " neither divides the " + std::to_string(tok) +
                                    "-token tile nor is a multiple of it");
}

/// What `explain` says about the decode kernel's instance for the problem's head size.
std::string decode_head_note(const ProblemDesc& pr, const DeviceInfo& device) {
  const int kvb = decode_mma_kv_bytes(pr);
  const int h = decode_mma_instance_head(pr.head_size, kvb);
  const int row = decode_mma_row_elems(h);
  const std::int64_t per_sm = decode_mma_slots(h, pr.gqa_ratio(), 1,
                                               device.max_shared_memory_per_block, 0, kvb);
  std::string r = "the head-" + std::to_string(h) + " instance (" + std::to_string(h / 16) +
                  " k-steps of 16 dims in S^T = K Q^T, " + std::to_string(h / 16) +
                  " 16-dim row tiles of O^T = V^T P^T";
  if (h != pr.head_size)
    r += "; head " + std::to_string(pr.head_size) + " masked on it: the query's dims past " +
         std::to_string(pr.head_size) + " are zero in shared memory, only the head's 16-byte "
         "chunks are copied from the cache, the k-steps and O^T row tiles past it are skipped" +
         (kvb == 1 && pr.head_size % 32 != 0
              ? " (the last fp8 k-step pair reads one zeroed key chunk past the head)"
              : "") +
         " and only its dims are stored";
  if (row != h && kvb == 2)
    r += "; shared-memory rows of " + std::to_string(row) +
         " elements, as the swizzle permutes 16-byte chunks in groups of 8: the chunks past "
         "the head are never copied from the cache nor read";
  if (h > 256)
    r += "; 2 warps and 32-token tiles, as a 64-token K + V tile pair is 128 KB of shared "
         "memory; Q^T fragments reloaded from shared memory per k-step pair, as the 128 O^T "
         "accumulators leave no registers for them";
  r += "; " + std::to_string(per_sm) + " CTA(s) per SM)";
  if (pr.layout == KVLayout::kSplit && pr.block_size == 1)
    r += "; split layout at block size 1 run by the nhd kernel: each block is one token whose "
         "8-element key chunks and value dims are contiguous, i.e. a row (whole 128-byte lines "
         "per copy; the split kernel's 8-token value chunks would cross blocks)";
  return r;
}

/// What `explain` says about a split count forced by PlanOptions::num_splits on the decode
/// fast path, whose cut (decode_mma_chunk) can give another count: splits are whole 64-token
/// tiles of the longest key range, at most kMaxDecodeSplits of them. `chunk` and `splits` are
/// the cut that was made.
std::string decode_forced_note(const ProblemDesc& pr, int forced, int chunk, int splits) {
  std::string r = "forced by options: num_splits " + std::to_string(forced);
  if (splits == forced) return r;
  // The key range decode_mma_chunk cuts: a window start inside a tile adds up to one tile.
  std::int64_t range = std::max(1, pr.batch.max_seq_len);
  const bool windowed =
      pr.sliding_window > 0 && std::int64_t{pr.sliding_window} + kDecodeTileTokens - 1 < range;
  if (windowed) range = std::int64_t{pr.sliding_window} + kDecodeTileTokens - 1;
  const std::int64_t per = (range + forced - 1) / forced;
  const std::int64_t tiles = (per + kDecodeTileTokens - 1) / kDecodeTileTokens * kDecodeTileTokens;
  r += ", which became " + std::to_string(splits) + ": the longest key range, " +
       std::to_string(range) + " tokens" +
       (windowed ? " (the sliding window of " + std::to_string(pr.sliding_window) +
                       " and the tile it starts in)"
                 : std::string()) +
       ", in " + std::to_string(forced) + " parts is " + std::to_string(per) +
       " tokens each, rounded up to whole " + std::to_string(kDecodeTileTokens) +
       "-token tiles: " + std::to_string(tiles) + " tokens";
  if (chunk > tiles)
    r += ", raised to " + std::to_string(chunk) + " as a sequence has at most " +
         std::to_string(kMaxDecodeSplits) + " splits";
  return r;
}

}  // namespace

Result<KernelChoice> choose_config(const ProblemDesc& problem, const DeviceInfo& device_info,
                                   const PlanOptions& options) {
  std::string why_not;
  const std::int64_t smem =
      decode_mma_smem_bytes(problem.head_size, decode_mma_kv_bytes(problem), problem.gqa_ratio());
  bool fast = decode_mma_supported(problem, &why_not);
  if (fast && smem > device_info.max_shared_memory_per_block) {
    fast = false;
    why_not = "shared memory limit below " + std::to_string(smem) + " bytes";
  }
  if (fast && options.tile_tokens > 0) {
    fast = false;
    why_not = "tile_tokens " + std::to_string(options.tile_tokens) +
              " forced (the decode path's tile is fixed: 64 tokens, 32 for head 512)";
  }
  if (fast) {
    KernelChoice c;
    c.kernel = KernelId::kCudaDecodeMMA;
    c.access = problem.access;
    c.tile_tokens = decode_mma_tile_tokens(problem.head_size);
    const DecodeMmaConfig cut = decode_mma_config(problem, device_info, options);
    const int chunk = cut.chunk_tokens;
    c.num_splits = cut.num_splits;
    c.shared_memory_bytes =
        cut.pair_heads ? decode_mma_smem_bytes(128)
                       : decode_mma_smem_bytes(problem.head_size, decode_mma_kv_bytes(problem),
                                               problem.gqa_ratio(), !cut.fp8_untuned);
    c.threads_per_block = 32 * decode_mma_warps(problem.head_size);
    const bool fp8 = decode_mma_kv_bytes(problem) == 1;
    const int kvb = decode_mma_kv_bytes(problem);
    const bool tuned = !fp8 || !cut.fp8_untuned;
    const int head_run = cut.pair_heads ? 128 : problem.head_size;
    const int gqa_run = cut.pair_heads ? 2 * problem.gqa_ratio() : problem.gqa_ratio();
    const int stages = decode_mma_stages(head_run, kvb, gqa_run, tuned);
    // The CTAs per SM the cut was made for (decode_mma_slots: registers and shared memory).
    const std::int64_t per_sm = decode_mma_slots(
        head_run, gqa_run, 1, device_info.max_shared_memory_per_block, 0, kvb, tuned);
    // Why the fp8 instance has other stages than the 16-bit one (decode_mma_stages).
    const std::string fp8_tiling =
        !tuned && !decode_mma_fp8_tuned() ? " (fp8 tuning off: PAGEDATTN_DECODE_FP8_TUNING=0)"
        : !tuned
            ? " (fp8 rows are half the bytes: twice the stages keep the bytes of the 16-bit "
              "kernel in flight; at 3 CTAs per SM with 4 stages this batch would need more "
              "splits, whose merge and shorter CTAs cost more than the third CTA gains)"
        : problem.head_size == 128 && gqa_run <= 8
            ? " (fp8 rows are half the bytes: more CTAs per SM with fewer stages keep as many "
              "tiles in flight and hide each tile's dequantisation and MMA latency with more "
              "warps)"
        : problem.head_size == 128
            ? " (fp8 rows are half the bytes: twice the stages keep the bytes of the 16-bit "
              "kernel in flight; 16 columns need the registers of 2 CTAs per SM)"
            : "";
    c.reason = "decode fast path: all rows are decodes, " +
               (fp8 ? std::string(to_string(problem.cache_dtype)) + " cache (" +
                          to_string(problem.q_dtype) +
                          " query; the fp8 bytes are staged as they are and dequantised to fp16 "
                          "after the shared-memory load, fp16 MMAs, fp32 accumulation, k_scale "
                          "in the softmax scale, v_scale in the normalisation)"
                    : std::string(to_string(problem.q_dtype)) + " cache") +
               ", head_size " + std::to_string(problem.head_size) + " on " +
               decode_head_note(problem, device_info) + ", GQA " +
               std::to_string(problem.gqa_ratio()) + " in the " +
               (problem.gqa_ratio() > 8 ? "16" : "8") + " MMA columns (16 tokens per warp in the rows); " +
               (cut.pair_heads ? "KV heads paired (each CTA streams two adjacent head-64 KV heads "
                                 "as one 256-byte row, their two query groups side by side in "
                                 "the 8 columns); "
                 : !decode_mma_pairs_heads(problem, decode_mma_heads_adjacent(problem)) ? ""
                 : cut.small_kernel
                     ? "KV heads not paired (the small-call kernel, which has no paired form); "
                     : "KV heads not paired (paired, the call would take the small-call kernel, "
                       "which has no paired form, or the device lacks shared memory for the "
                       "head-128 stages); ") +
               std::to_string(stages) + "-stage per-warp cp.async pipeline of " +
               std::to_string(decode_mma_tile_tokens(problem.head_size)) + "-token K/V tiles (" +
               std::to_string(decode_mma_warps(problem.head_size)) +
               " warps of 16 tokens; independent of block_size " +
               std::to_string(problem.block_size) + "), " + std::to_string(per_sm) +
               " CTAs per SM" + (fp8 ? fp8_tiling : std::string()) + "; splits of " +
               std::to_string(chunk) +
               " tokens (" +
               (cut.batch_invariant
                    ? "batch-invariant: split points fixed every " +
                          std::to_string(cut.chunk_tokens) +
                          " tokens whatever the batch and device, merged by the merge kernel in "
                          "a fixed order; no cluster merge, no small-call kernel"
                    : options.num_splits > 0
                        ? decode_forced_note(problem, options.num_splits, chunk, c.num_splits)
                        : "balanced over the SMs") +
               "), at most " + std::to_string(c.num_splits) + " per sequence";
    return c;
  }
  // Forced tiles or splits configure the tiled kernel: they keep every row of a batch with
  // prefill chunks on it, which the reason says by the options' values.
  const std::string forced_tiled =
      (options.tile_tokens > 0 ? "tile_tokens " + std::to_string(options.tile_tokens) : "") +
      (options.tile_tokens > 0 && options.num_splits > 0 ? " and " : "") +
      (options.num_splits > 0 ? "num_splits " + std::to_string(options.num_splits) : "") +
      " forced (" + (options.tile_tokens > 0 && options.num_splits > 0 ? "they configure"
                                                                        : "it configures") +
      " the tiled kernel)";
  std::string why_rows;
  const bool rows_fast = problem.batch.num_prefill_seqs > 0 && options.num_splits == 0 &&
                         options.tile_tokens == 0 && smem <= device_info.max_shared_memory_per_block &&
                         decode_mma_rows_supported(problem, &why_rows);
  if (problem.batch.num_prefill_seqs > 0 && (options.num_splits > 0 || options.tile_tokens > 0))
    why_rows = forced_tiled;
  PlanOptions tiled_options = options;
  // Prefill rows: the tensor-core prefill kernel when it supports the problem. Forced tiles
  // or splits keep the tiled kernel (tests use them to exercise it), decode rows included.
  std::string why_prefill;
  bool prefill_fast = false;
  if (problem.batch.num_prefill_seqs > 0) {
    if (options.tile_tokens > 0 || options.num_splits > 0)
      why_prefill = forced_tiled;
    else
      prefill_fast = prefill_mma_supported(problem, device_info.max_shared_memory_per_block,
                                           &why_prefill);
  }
  // The Hopper prefill kernel where it runs (it also takes head 256, which prefill_mma does
  // not); the same forced options keep the tiled kernel.
  std::string why_wgmma;
  bool wgmma = false;
  if (problem.batch.num_prefill_seqs > 0) {
    if (options.tile_tokens > 0 || options.num_splits > 0)
      why_wgmma = why_prefill;
    else if (options.no_wgmma_prefill)
      why_wgmma = "no_wgmma_prefill set";
    else
      wgmma = prefill_wgmma_supported(problem, device_info, &why_wgmma,
                                      !options.wgmma_prefill_v1);
  }
  // A tiled kernel that is only the fallback of the other kernels should not size the
  // workspace for splits. Batch-invariant mode keeps its fixed split cut: there the tiled
  // kernel runs the decode rows the decode fast path does not take (beside the prefill
  // kernel, as it runs them alone), so their bits do not depend on prefill chunks joining.
  const bool one_split = (rows_fast || prefill_fast || wgmma) && !options.batch_invariant;
  if (one_split) tiled_options.num_splits = 1;
  auto c = tiled_choose(problem, device_info, tiled_options,
                        one_split && options.num_splits == 0
                            ? "a fallback of the kernels above: no split workspace"
                            : nullptr);
  if (!c.ok()) return c;
  if (rows_fast) c->decode_rows_fast_path = true;
  c->decode_rows_tiled = options.batch_invariant && !rows_fast && (prefill_fast || wgmma) &&
                         problem.batch.num_decode_seqs > 0;
  const int nd = problem.batch.num_decode_seqs;
  // "the 3 decode rows run" / "the decode row runs".
  const std::string rows_run =
      nd == 1 ? "the decode row runs" : "the " + std::to_string(nd) + " decode rows run";
  const std::string decode_note =
      rows_fast ? rows_run + " on the decode fast path" +
                      (options.batch_invariant
                           ? " (batch-invariant: split points every " +
                                 std::to_string(
                                     decode_mma_config(problem, device_info, options).chunk_tokens) +
                                 " tokens, as when they run alone)"
                           : std::string())
                : "decode fast path not used: " +
                      (problem.batch.num_prefill_seqs > 0 && !why_rows.empty() ? why_rows : why_not);
  // Where the decode rows of a batch with a prefill kernel go, said once for both kernels.
  const std::string decode_rows_note =
      rows_fast ? decode_note + mixed_order_note(mixed_concurrent_mode())
      : c->decode_rows_tiled
          ? rows_run + " on the tiled kernel first with its fixed split cut, as alone "
                       "(batch-invariant; " + decode_note + ")"
      : nd > 0 ? rows_run + " on it too (" + decode_note + ")"
          : std::string("no decode rows");
  if (wgmma) {
    c->prefill_rows_mma = true;
    c->prefill_rows_wgmma = true;
    c->prefill_rows_wgmma_ws = !options.wgmma_prefill_v1;
    const int h = problem.head_size;
    std::string r = "Hopper tensor-core prefill kernel (cuda_prefill_wgmma" +
                    std::string(c->prefill_rows_wgmma_ws ? ", warp-specialised" : ", first version") +
                    ") for the prefill rows of " +
                    std::to_string(problem.batch.num_prefill_seqs) +
                    " chunk(s): 128 (query token, query head) rows per CTA with the GQA group of " +
                    std::to_string(problem.gqa_ratio()) +
                    " flattened into them, wgmma m64nNk16 for QK^T (both operands in shared "
                    "memory) and PV (P in registers), fp32 accumulation, ";
    if (c->prefill_rows_wgmma_ws) {
      const int inst = prefill_ws_instance_head(h);
      const bool f8 = is_fp8(problem.cache_dtype);
      if (inst != h)
        r += "the head-" + std::to_string(inst) + " instance with head " + std::to_string(h) +
             " masked on it (the query's and the cache's dims past " + std::to_string(h) +
             " are zero in shared memory: " +
             std::string(f8 ? "the producer stores zeros for the chunks past the head"
                         : problem.layout == KVLayout::kSplit
                             ? "cp.async zero-fills the chunks past the head"
                             : "cp.async zero-fills the chunks past the head and a TMA box's "
                               "dims past the tensor map's head dim read as zeros") +
             ", so the GEMMs do " + std::to_string(inst) + "/" + std::to_string(h) +
             " of the head's work and only its dims are stored), ";
      r += "one producer warpgroup (setmaxnreg down) gathering K and V through the block table "
           "into two rings of " +
           std::to_string(prefill_ws_stages(inst)) + " stages of " +
           std::to_string(prefill_ws_tile_tokens(inst)) +
           " tokens (" + ws_loader_note(inst, problem.block_size, problem.cache_dtype, problem.layout) +
           "), two consumer warpgroups of 64 rows " +
           std::string(inst == 128 ? "taking turns at the tensor cores (named barriers) so "
                                     "that one's softmax overlaps the other's GEMMs, "
                       : inst == 64 ? "(no turn-taking for head 64: its GEMMs are too short "
                                      "for the hand-over to pay), "
                                    : "(no turn-taking for head 256: its 2-stage rings make "
                                      "the turns wait on loads), ") +
           std::to_string(prefill_ws_smem_bytes(inst)) +
           " bytes of shared memory, no KV split (PlanOptions::wgmma_prefill_v1 selects the "
           "first version); ";
    } else {
      r += "two warpgroups of 64 rows, " + std::to_string(prefill_wgmma_stages(h)) +
           "-stage cp.async pipeline of " + std::to_string(prefill_wgmma_tile_tokens(h)) +
           "-token K/V tiles with a CTA barrier per tile (independent of block_size " +
           std::to_string(problem.block_size) + "), " +
           std::to_string(prefill_wgmma_smem_bytes(h)) +
           " bytes of shared memory, no KV split (wgmma_prefill_v1 set); ";
    }
    r += decode_rows_note;
    c->reason = r + "; fallback for tensors that are not 16-byte aligned: " + c->reason;
  } else if (prefill_fast) {
    c->prefill_rows_mma = true;
    const int stages =
        prefill_mma_stages(problem.head_size, device_info.max_shared_memory_per_block);
    std::string r = "tensor-core prefill kernel (cuda_prefill_mma) for the prefill rows of " +
                    std::to_string(problem.batch.num_prefill_seqs) +
                    " chunk(s): 64 (query token, query head) rows per CTA with the GQA group of " +
                    std::to_string(problem.gqa_ratio()) +
                    " flattened into them, mma.sync m16n8k16 for QK^T and PV (fp32 "
                    "accumulation), " +
                    std::to_string(stages) + "-stage cp.async pipeline of 64-token K/V tiles "
                    "(independent of block_size " + std::to_string(problem.block_size) + "), " +
                    std::to_string(prefill_mma_smem_bytes(problem.head_size, stages)) +
                    " bytes of shared memory, no KV split; ";
    r += decode_rows_note;
    c->reason = r + "; wgmma prefill kernel not used: " + why_wgmma +
                "; fallback for tensors that are not 16-byte aligned: " + c->reason;
  } else {
    c->reason += "; " + decode_note;
    if (problem.batch.num_prefill_seqs > 0)
      c->reason += "; tensor-core prefill kernel not used: " + why_prefill +
                   " (wgmma prefill kernel: " + why_wgmma + ")";
  }
  return c;
}

namespace {
std::atomic<int> mixed_concurrent_override{-1};
}  // namespace

int mixed_concurrent_mode() {
  const int forced = mixed_concurrent_override.load(std::memory_order_relaxed);
  if (forced >= 0) return forced;
  static const int mode = [] {
    const char* e = std::getenv("PAGEDATTN_MIXED_CONCURRENT");
    const std::string v = e != nullptr ? e : "";
    // Forking with the decode rows enqueued first measured fastest on an H200 (T-conv-mixed
    // 1.10x over serial, docs/performance_prefill.md): the default.
    return v == "0" ? 0 : v == "1" ? 1 : 2;
  }();
  return mode;
}

void set_mixed_concurrent_for_testing(int mode) {
  mixed_concurrent_override.store(mode >= 0 && mode <= 2 ? mode : -1, std::memory_order_relaxed);
}

}  // namespace pagedattn::cuda
