// The CUDA decode fast path (KernelId::kCudaDecodeMMA): host-only declarations, so that the
// selection function can size it in any build.
//
// Design (docs/performance.md has the measurements and what each step gained):
//  - one CTA = 4 warps = one (sequence, KV head, KV split); the MMAs compute S^T = K Q^T and
//    O^T += V^T P^T with 16 tokens in the rows and the GQA group of the KV head (<= 8 or
//    <= 16 query heads) in the 8 or 16 columns of m16n8k16 tensor-core MMAs, so each K/V byte
//    is read from HBM exactly once per step; P^T reaches the second MMA through movmatrix;
//  - head 64 with GQA <= 4 on nhd caches runs two adjacent KV heads per CTA as one 128-dim row
//    (decode_mma_pairs_heads: a block-diagonal Q^T), through the head-128 pipeline;
//  - K/V tiles of 64 tokens move HBM -> shared memory with 16-byte cp.async (whole 128-byte
//    lines per copy instruction) in a 3-stage (head 128) / 4-stage (head 64) pipeline; nhd/hnd
//    tile rows are padded by 16 bytes so that ldmatrix is conflict-free and every shared-memory
//    address is a register plus an immediate; each token's (block, offset) comes from a per-lane
//    cursor stepped by additions (one division per sequence), so block size and tile size are
//    independent and padded pages cost nothing;
//  - every warp copies and computes its own 16 tokens of each tile, so it waits only for its
//    own copies (no CTA barrier per tile), and keeps its own online-softmax state (log2 units);
//    the four states are merged in shared memory at the end of the split;
//  - the KV range of each sequence is cut into splits of `chunk_tokens` (a multiple of 64)
//    chosen from the batch's total work and the device's CTA slots (about two waves; one wave
//    for small batches); batches with many splits and up to 256 sequences number their
//    (sequence, split) items, longest first, one CTA each, so that no CTA is launched for a split
//    a short sequence lacks; sequences that need one split write their output directly; the
//    splits of a one-wave call merge inside a thread-block cluster (each CTA pushes its partial
//    outputs with st.async into the shared memory of the CTA that combines them, which waits on
//    an mbarrier for exactly those bytes: no cluster-wide barrier), the others through a
//    deterministic log-sum-exp merge kernel;
//  - fp8 caches (e4m3, e5m2) stage their bytes as they are (half the bytes of a 16-bit tile)
//    and dequantise to fp16 after each ldmatrix (exact), both MMAs in fp16 whatever the query
//    dtype (a bf16 query is rescaled by a power of two per head into fp16 in shared memory);
//    k_scale joins the softmax scale, v_scale the final normalisation (decode_mma.cu explains
//    the permuted k-steps that let ldmatrix move fp8 bytes);
//  - head 256 (GQA <= 8) runs one CTA per SM (its three stages take 192 KB of shared memory);
//  - heads 80, 96, 112 and 192 (16-bit caches) are instances of their own (HEAD / 16 k-steps
//    and O^T row tiles; decode_mma_h<HEAD>.cu): 80-112 keep 128-element shared-memory rows
//    (the swizzle permutes 16-byte chunks in groups of 8; the chunks past the head are never
//    copied nor read), 192 has 384-byte rows swizzled per 128-byte group; head 512 (GQA <= 8)
//    runs 2 warps on 32-token tiles (decode_mma_warps) and reloads Q^T's fragments from shared
//    memory per k-step pair; other head sizes keep the tiled kernel;
//  - the split layout at block size 1 (16-bit caches) runs the nhd kernel
//    (decode_mma_split_as_rows), and calls of more than 65535 sequences launch in parts.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "pagedattn/attention.h"
#include "pagedattn/kv_cache.h"
#include "pagedattn/select.h"

namespace pagedattn::cuda {

/// KV tokens per pipeline stage of the decode kernel.
inline constexpr int kDecodeTileTokens = 64;
inline constexpr int kDecodeThreads = 128;
/// Most splits of one sequence (the merge kernel keeps one weight per split in shared memory).
inline constexpr int kMaxDecodeSplits = 512;
/// Split size of batch-invariant plans (PlanOptions::batch_invariant): every sequence's keys
/// are cut at multiples of this many tokens (from its window start rounded down to 64),
/// whatever the batch and the device, and the splits merge in the merge kernel with a fixed
/// number of split groups; up to kMaxDecodeSplits splits (524288 tokens; a longer sequence
/// in the batch lengthens every split).
inline constexpr int kBatchInvariantChunkTokens = 1024;
/// Most sequences of one launch of the split and merge kernels (gridDim.z / gridDim.y): a
/// call with more runs them in consecutive launches (decode_mma_run).
inline constexpr int kDecodeMaxGridSeqs = 65535;
/// Most sequences of a work-list call (the kernel's scan: 32 lanes x 8 sequences).
inline constexpr int kWorkListMaxSeqs = 256;

/// Whether decode_mma_run numbers the (sequence, split) items of the call and lets the CTAs
/// take them in order (work-list mode: many splits and few enough sequences; a grid of splits x
/// sequences would launch a CTA for every split a short sequence lacks). `num_seqs` counts
/// every sequence of the call, skipped and prefill rows included. The launcher and the plan's
/// merge-mode flags (cluster_merge, small_kernel: false for work-list calls) use this one rule.
constexpr bool decode_mma_work_list(int num_splits, int num_seqs) {
  return num_splits >= 8 && num_seqs > 1 && num_seqs <= kWorkListMaxSeqs;
}

/// Largest thread-block cluster the merge-in-cluster mode uses (the portable cluster size).
inline constexpr int kMaxClusterSplits = 8;
/// LSE slots per split in a cluster CTA's receive buffer (the largest GQA group).
inline constexpr int kClusterLseSlots = 16;

/// Cluster merge: output elements (of the gqa * head_size of one KV head) that each of the
/// `splits` CTAs of a cluster combines, ceil(total / splits) rounded up to a multiple of 4;
/// the last CTAs may get fewer, or none.
constexpr int decode_cluster_share(int head_size, int gqa, int splits) {
  const int total = gqa * head_size;
  return ((total + splits - 1) / splits + 3) / 4 * 4;
}

/// Cluster merge: bytes of the buffer into which the other splits of a cluster push their
/// partial outputs and LSEs (fp32), [splits][share] + [splits][kClusterLseSlots]. At most
/// 8.8 KB (head 128, GQA 16, 2 splits), which leaves the CTAs per SM of
/// decode_mma_reg_ctas unchanged on an H100/H200 (test_decode_select.cpp checks it).
constexpr std::int64_t decode_cluster_rx_bytes(int head_size, int gqa, int splits) {
  return std::int64_t{splits} * (decode_cluster_share(head_size, gqa, splits) + kClusterLseSlots) *
         4;
}

/// The largest decode_cluster_rx_bytes over the GQA groups (1-16) and cluster sizes (2-8) the
/// kernel runs with: the dynamic shared-memory limit the kernel is given once for all calls.
constexpr std::int64_t decode_cluster_rx_max_bytes(int head_size) {
  std::int64_t m = 0;
  for (int gqa = 1; gqa <= 16; ++gqa)
    for (int splits = 2; splits <= kMaxClusterSplits; ++splits)
      m = std::max(m, decode_cluster_rx_bytes(head_size, gqa, splits));
  return m;
}

/// Small calls (decode_small.cu): a one-wave cluster-merge call on an nhd/hnd cache whose
/// splits are at most kSmallMaxWarps * 16 tokens runs a second kernel: one CTA of
/// kSmallMaxWarps warps per split, one tile of chunk / kSmallMaxWarps tokens (16 or 8) per
/// warp, the K/V/Q bytes loaded straight into registers, the warps merged in shared memory and
/// the splits in the cluster. One CTA
/// per SM (up to 255 registers per thread), so it is used only when the call's CTAs fit one
/// per SM.
inline constexpr int kSmallMaxWarps = 8;

/// Dynamic shared memory of one small-call CTA (fp32): every warp's accumulators,
/// [kSmallMaxWarps][head_size / 8 units of 8 dims][8 rows][columns], then what the cluster's
/// CTAs push: [ceil(head_size / 8 / splits) units][splits][8 rows][columns] partial outputs and
/// [splits][columns] LSEs; columns = 8 for GQA <= 8, else 16.
constexpr std::int64_t decode_small_smem_bytes(int head_size, int gqa, int splits) {
  const int warps = kSmallMaxWarps;
  const std::int64_t cols = gqa <= 8 ? 8 : 16;
  const std::int64_t units = head_size / 8;
  const std::int64_t rx_units = (units + splits - 1) / splits;
  return 4 * cols * (std::int64_t{warps} * units * 8 + rx_units * splits * 8 + splits);
}

/// Static shared memory of the small-call kernel (its per-warp maxima, sums and weights, the
/// sinks and the mbarrier; decode_small.cu), which the device's per-block limit must hold
/// together with the dynamic part.
constexpr std::int64_t decode_small_static_smem_bytes(int gqa) {
  const std::int64_t cols = gqa <= 8 ? 8 : 16;
  const std::int64_t w = kSmallMaxWarps;
  return 4 * cols * (2 * w + 1 + w * (w + 1)) + 8;
}

/// The largest decode_small_smem_bytes over the cluster sizes (2-8): the small kernel's one
/// shared-memory attribute.
constexpr std::int64_t decode_small_smem_max_bytes(int head_size, int gqa) {
  std::int64_t m = 0;
  for (int splits = 2; splits <= kMaxClusterSplits; ++splits)
    m = std::max(m, decode_small_smem_bytes(head_size, gqa, splits));
  return m;
}

/// Stages of the cp.async pipeline (the same for every head size: head 64 keeps as many bytes
/// in flight per SM through more CTAs, see decode_mma_reg_ctas).
inline constexpr int kDecodeStages = 3;

/// CTAs per SM that the decode kernel's registers allow, its __launch_bounds__ minimum:
/// 65536 registers over 128 threads give 128 registers per thread for 4 CTAs, 170 for 3 and
/// 255 for 2. Head 64 with a GQA group of up to 8 (8 MMA columns) fits 128 registers without
/// spills; with 16 columns it needs 3 CTAs' budget, and head 128 2 CTAs'. On an H200, head 64
/// at 4 CTAs per SM took W2 from 136.7 to 133.1 us against 3 CTAs with a 4-stage pipeline
/// (docs/performance.md).
/// Head 256 (GQA <= 8 only) holds one CTA per SM in shared memory anyway: 255 registers.
constexpr int decode_mma_reg_ctas(int head_size, int gqa) {
  return head_size <= 64 ? (gqa <= 8 ? 4 : 3) : head_size <= 128 ? 2 : 1;
}

/// Whether the fp8 instances run with the session-15 tuning (issue 21; the default), or as
/// before when the environment sets PAGEDATTN_DECODE_FP8_TUNING=0 (read once per process; an
/// A/B knob for one benchmark run, which plans and launches under the same value). Before:
/// head 128 in 6 stages at 2 CTAs per SM, head 64 in 3 stages, head 256 planned at 1 CTA per
/// SM although 2 ran.
bool decode_mma_fp8_tuned();

/// Whether the merge kernel's CTAs with nothing to merge return without waiting for the split
/// kernel (decode_mma_launch.cuh, decode_merge_kernel; the default), or wait as before when
/// the environment sets PAGEDATTN_DECODE_MERGE_EARLY_EXIT=0 (read once per process; an A/B
/// knob for one benchmark run).
bool decode_merge_early_exit();

/// The compile-time instance that runs head size `head_size` with `kv_bytes`-byte cache
/// elements (2: fp16/bf16, 1: fp8), 0 when none does. Each instance size is its own
/// instance (16-bit: 64, 80, 96, 112, 128, 192, 256, 512; fp8: 64, 128, 256, 512); a head
/// between them that is a multiple of 16 runs on the next larger maskable one
/// (decode_mma_maskable), in a masked instance of its own with the dims past the head left out:
/// 16-bit 144, 160, 176 on 192 and 208, 224, 240 on 256; fp8 80, 96, 112 on 128 and 144-240 on
/// 256. Heads below 64,
/// other multiples of 8 and heads between 256 and 512 keep the tiled kernel (the head-64 and
/// head-128 16-bit instances, the hot ones, are never masked).
constexpr int decode_mma_instance_head(int head_size, int kv_bytes) {
  if (head_size == 64 || head_size == 128 || head_size == 256 || head_size == 512)
    return head_size;
  if (head_size % 16 != 0 || head_size < 64 || head_size > 256) return 0;
  if (kv_bytes == 1) return head_size < 128 ? 128 : 256;
  if (head_size < 128 || head_size == 192) return head_size;  // 80, 96, 112, 192
  return head_size < 192 ? 192 : 256;
}

/// Whether head HEAD has masked instances (decode_mma_kernel's RH, beside the exact one), one
/// for each head below it that runs there (decode_mma_instance_head): the query's dims past the head are zero
/// in shared memory, only the head's 16-byte chunks are copied from the cache, the S^T k-steps
/// and O^T row tiles past it are skipped (fp8: k-step pairs of 32 dims, whose dead half reads
/// zeroed key chunks) and only its dims are stored.
constexpr bool decode_mma_maskable(int head, bool fp8) {
  return fp8 ? head == 128 || head == 256 : head == 192 || head == 256;
}

/// The lowest head that runs masked on instance `head` (decode_mma_instance_head; 0 when none
/// does): the multiples of 16 from it to head - 16 each have a masked instance there.
constexpr int decode_mma_masked_low(int head, bool fp8) {
  for (int h = 16; h < head; h += 16)
    if (decode_mma_instance_head(h, fp8 ? 1 : 2) == head) return h;
  return 0;
}

/// Stages of the pipeline for head `head_size`, `kv_bytes`-byte cache elements and a GQA
/// group of `gqa` (the MMA columns: <= 8 or 9-16). kDecodeStages for 16-bit caches. fp8 rows
/// are half the bytes of 16-bit ones, so a 64-token tile moves half the bytes for the same
/// per-tile work (block-table loads, cursor steps, ldmatrix, MMAs, softmax), and what limits
/// the kernel is how many tiles are in flight per SM and how many warps hide each tile's
/// latency, not the staged bytes:
///  - head 128, GQA <= 8: 4 stages at 3 CTAs per SM (decode_mma_sm_ctas; 70 KB each):
///    12 warps per SM instead of 8 hide the dequantisation and MMA latency of each tile, with
///    3 x 3 tiles in flight of 16 KB. Before: 6 stages at 2 CTAs (the in-flight bytes of
///    16-bit head 128), W1 at 84% of the read ceiling; and before that 3 stages, whose 164
///    registers and 54 KB let 3 CTAs share an SM while the plan counted 2 (W1's 512 CTAs ran
///    as 396 plus a tail of 116, at 70%). 16 columns keep 6 stages at 2 CTAs (the register
///    budget of 3 CTAs, 168, would spill their accumulators);
///  - head 64: 3 stages (4 CTAs per SM, registers). 6 stages (the bytes in flight of the
///    16-bit kernel) measured slower on every even row (H200, W1 split 72.1 against 69.6 us,
///    64 x 1016 34.3 against 31.0);
///  - head 256: 3 stages (2 CTAs per SM: 104 KB each);
///  - head 512: 2 stages of 32-token tiles (81 KB), 2 CTAs per SM (decode_mma_sm_ctas): 4
///    warps per SM and one 32 KB tile pair in flight per CTA. With 4 stages (148 KB, one CTA
///    of 2 warps per SM) W1 ran at 65% of the read ceiling (726.7 us, H200): the tile work of
///    2 warps, not the bytes in flight, limited it; 2 x 2 stages ran it at 95% (489.7 us).
///    3 stages (113 KB) would miss a second CTA per SM by a few hundred bytes.
/// `tuned` = false gives the previous choice (decode_mma_fp8_tuned).
constexpr int decode_mma_stages(int head_size, int kv_bytes, int gqa = 1, bool tuned = true) {
  if (kv_bytes != 1) return kDecodeStages;
  if (const int ih = decode_mma_instance_head(head_size, 1)) head_size = ih;  // masked heads
  if (head_size == 512) return 2;
  if (head_size == 128) return tuned && gqa <= 8 ? 4 : 6;
  return kDecodeStages;
}

/// Head sizes the pipelined kernel is instantiated for (16-bit caches; fp8 caches: those of
/// decode_mma_fp8_head_instance). Each is its own compile-time instance: the k-steps of the
/// S^T MMA and the 16-dim row tiles of O^T are HEAD / 16 (5, 6, 7, 12 and 32 for the new
/// heads).
constexpr bool decode_mma_head_instance(int head_size) {
  return head_size == 64 || head_size == 80 || head_size == 96 || head_size == 112 ||
         head_size == 128 || head_size == 192 || head_size == 256 || head_size == 512;
}

/// Head sizes with fp8-cache instances of their own (the fp8 k-steps pair 16-byte chunks of
/// unpadded rows: the instance head is a multiple of 64, and 192-byte rows would not be a whole
/// number of 128-byte swizzle groups); the heads between run masked on the next larger one
/// (decode_mma_instance_head).
constexpr bool decode_mma_fp8_head_instance(int head_size) {
  return head_size == 64 || head_size == 128 || head_size == 256 || head_size == 512;
}

/// Warps per CTA of the pipelined kernel (each computes 16 tokens of every tile): 4, and 2
/// for head 512, whose 64-token K + V tile pair alone is 128 KB of shared memory: its tiles
/// are 32 tokens (64 KB per stage, 3 stages in 192 KB, one CTA per SM).
constexpr int decode_mma_warps(int head_size) { return head_size > 256 ? 2 : 4; }
/// KV tokens per pipeline stage for `head_size`: kDecodeTileTokens, 32 for head 512. Splits
/// stay multiples of kDecodeTileTokens (whole tiles of either size).
constexpr int decode_mma_tile_tokens(int head_size) { return 16 * decode_mma_warps(head_size); }

/// Elements per 16-bit shared-memory row of the kernel (query rows and 16-bit K/V tile rows):
/// head_size rounded up to 64 (128 bytes), because the XOR swizzle permutes the 16-byte
/// chunks inside each group of 8; heads 80/96/112 keep 128-element rows whose chunks past
/// the head are never copied nor read. Equal to head_size for 64, 128, 192 and 256.
constexpr int decode_mma_row_elems(int head_size) { return (head_size + 63) / 64 * 64; }

/// CTAs per SM an instance is built for (its __launch_bounds__ minimum; the `stages` of
/// decode_mma_stages): decode_mma_reg_ctas, except the 4-stage fp8 head-128 instance
/// (8 columns), built for 3 (at most 168 registers per thread).
constexpr int decode_mma_bound_ctas(int head_size, int nt, bool fp8, int stages) {
  return fp8 && head_size == 128 && nt == 1 && stages == 4 ? 3
                                                           : decode_mma_reg_ctas(head_size, 8 * nt);
}

/// The most CTAs per SM the registers let the instance for (`head_size`, `gqa`, `kv_bytes`)
/// run, which the plan counts (decode_mma_slots; shared memory may allow fewer): the launch
/// bound of the instance, and 2 for head 256, whose launch bound of 1 still lets two CTAs of
/// 128 threads share an SM's 65536 registers (255 per thread at most). fp8 head 256 (104 KB
/// of shared memory) did run 2 CTAs per SM where the plan counted 1, and cut W6-shaped batches
/// for half the CTA slots the device had. `tuned` as in decode_mma_stages.
constexpr int decode_mma_sm_ctas(int head_size, int gqa, int kv_bytes, bool tuned = true) {
  if (const int ih = decode_mma_instance_head(head_size, kv_bytes)) head_size = ih;
  if (tuned && head_size == 256) return 2;
  if (head_size == 512 && kv_bytes == 1) return 2;  // 2 stages, 81 KB (decode_mma_stages)
  return decode_mma_bound_ctas(head_size, gqa <= 8 ? 1 : 2, kv_bytes == 1,
                               decode_mma_stages(head_size, kv_bytes, gqa, tuned));
}

/// Dynamic shared memory of one CTA of an instance with `stages` stages: K and V tiles of
/// decode_mma_tile_tokens unpadded, swizzled token rows per stage (`kv_bytes`-byte cache
/// elements: 2 for fp16/bf16, rows of decode_mma_row_elems, 1 for fp8), plus 16 query rows
/// (16-bit, decode_mma_row_elems) and the slack to align the tiles to their row size (256
/// bytes; 512 for rows over 256 bytes, 1024 for the 1024-byte rows of head 512: the swizzle
/// XORs address bits up to the row size).
constexpr std::int64_t decode_mma_smem_bytes_for(int head_size, int kv_bytes, int stages) {
  if (const int ih = decode_mma_instance_head(head_size, kv_bytes)) head_size = ih;  // masked
  // 16-bit rows are decode_mma_row_elems wide (the swizzle's 8-chunk groups); tiles are
  // decode_mma_tile_tokens rows (32 for head 512).
  const std::int64_t row = kv_bytes == 2 ? std::int64_t{decode_mma_row_elems(head_size)} * 2
                                         : std::int64_t{head_size} * kv_bytes;
  const std::int64_t tile = std::int64_t{decode_mma_tile_tokens(head_size)} * row;
  return stages * 2 * tile + 16 * std::int64_t{decode_mma_row_elems(head_size)} * 2 +
         (row > 512 ? 1024 : row > 256 ? 512 : 256);
}

/// decode_mma_smem_bytes_for with the stages the plan and the launcher use for a GQA group of
/// `gqa` (decode_mma_stages under decode_mma_fp8_tuned).
inline std::int64_t decode_mma_smem_bytes(int head_size, int kv_bytes = 2, int gqa = 1,
                                          bool tuned = decode_mma_fp8_tuned()) {
  return decode_mma_smem_bytes_for(head_size, kv_bytes,
                                   decode_mma_stages(head_size, kv_bytes, gqa, kv_bytes != 1 || tuned));
}

/// Bytes per cache element of `problem` as the decode kernel stages them (1 for fp8 caches,
/// 2 otherwise): the kv_bytes argument of decode_mma_smem_bytes / decode_mma_slots.
inline int decode_mma_kv_bytes(const ProblemDesc& problem) {
  return problem.cache_dtype == DType::kFloat8E4M3 || problem.cache_dtype == DType::kFloat8E5M2
             ? 1
             : 2;
}

/// Whether the fast path can run `problem` (the reason when not, for `explain`). Needs: CUDA,
/// every sequence a decode (query_len 1) or skipped, query fp16 or bf16 and the cache of the
/// same dtype or fp8 (e4m3, e5m2), a head_size with an instance (decode_mma_instance_head:
/// every multiple of 16 from 64 to 256, and 512) whose GQA ratio is <= 16 on instances up to
/// head 128 and <= 8 above (the registers of 16 query columns would spill; other head sizes
/// keep the tiled kernel), and for the split
/// layout block_size % 8 == 0 (16-bit caches; or 1: decode_mma_split_as_rows) / % 16 == 0
/// (fp8): 16-byte value chunks must not cross a block. Alignment of strides and pointers is checked per call
/// (decode_mma_aligned); unaligned tensors take the general path.
bool decode_mma_supported(const ProblemDesc& problem, std::string* why_not);
/// The same rules without "every sequence a decode": whether the decode rows of a mixed batch
/// can run on the fast path while the prefill chunks take the tiled kernel.
bool decode_mma_rows_supported(const ProblemDesc& problem, std::string* why_not);

/// True when every stride (except the innermost) of the cache, query and output is a multiple
/// of 8 elements, as 16-byte cp.async needs (checked at plan time).
bool decode_mma_aligned_strides(const AttentionArgs& args);
/// Whether `cache` is a 16-bit split-layout cache of block size 1, which the fast path runs
/// with the nhd kernel: key [blocks, heads, dim / 8, 1, 8] and value [blocks, heads, dim, 1]
/// hold each token's dims in order, as a row (decode_mma_aligned_strides requires the chunk
/// and dim strides 8 and 1). The split kernel's 8-token value chunks would cross blocks.
bool decode_mma_split_as_rows(const KVCache& cache);
/// decode_mma_aligned_strides and 16-byte aligned base pointers (checked at run time; an
/// unaligned call takes the planned tiled fallback).
bool decode_mma_aligned(const AttentionArgs& args);

/// Split size for the batch's decode rows (pure: decode_mma_config calls it for select_kernel
/// and plan_attention alike): the KV range of the longest sequence is cut into equal
/// 64-token-aligned splits so that the CTAs of the whole batch fill the device's CTA slots
/// about twice (enough for the hardware scheduler to even out unequal lengths, few enough that
/// each CTA's pipeline fill and epilogue stay a small part of its time). Batches that fit one
/// wave are cut for one wave where that was measured to pay: short or long balanced splits
/// fill the slots, and balanced splits shorter than 2048 tokens take one CTA per SM when that
/// makes 2-8 splits merged in a cluster (the measurements are in decode_mma_plan.cpp).
/// `forced_splits` > 0 (PlanOptions::num_splits) cuts the longest sequence into that many.
/// Returns the split size in tokens (a multiple of kDecodeTileTokens); `num_splits` receives
/// the largest per-sequence split count (the grid's split dimension).
int decode_mma_chunk(const ProblemDesc& problem, int num_units, std::int64_t max_smem_per_block,
                     int forced_splits, int* num_splits);

/// CTA slots of the decode kernel on a device: `num_units` SMs times the CTAs of head size
/// `head_size` that `max_smem_per_block` bytes of shared memory per SM hold (1 KB reserved
/// per CTA by the hardware; at least 1), at most decode_mma_sm_ctas(head_size, gqa, kv_bytes).
/// An H200 holds 2 (head 128), 4 (head 64, GQA <= 8) or 3 (head 64, GQA 9-16), 1 (head 256);
/// fp8: 3 (head 128, GQA <= 8), 2 (head 128, GQA 9-16; heads 256 and 512), 4 / 3 (head 64).
/// `extra_smem_bytes`: shared memory each CTA takes beyond decode_mma_smem_bytes (the cluster
/// merge's receive buffer).
std::int64_t decode_mma_slots(int head_size, int gqa, int num_units,
                              std::int64_t max_smem_per_block, std::int64_t extra_smem_bytes = 0,
                              int kv_bytes = 2, bool tuned = decode_mma_fp8_tuned());

/// The decode kernel's cut of one batch (decode_mma_config).
struct DecodeMmaConfig {
  int chunk_tokens = 0;  // split size, a multiple of kDecodeTileTokens
  int num_splits = 1;    // most splits of one sequence
  /// Upper bound of the (sequence, split) items of the batch the plan was made for: the CTAs
  /// per KV head that work-list mode launches. A replay with longer sequences stays correct
  /// (the CTAs stride over the items), only less balanced.
  std::int64_t max_items = 1;
  /// The splits of each (sequence, KV head) merge inside one thread-block cluster (2-8 splits,
  /// all CTAs in one wave: a latency-bound call, where the merge kernel's launch and memory
  /// round trips are most of the time). Batches of several waves keep the merge kernel:
  /// measured on the H200, clusters there cost 3-4% (co-scheduling constraints). Never for a
  /// work-list call (decode_mma_work_list), which merges through the merge kernel.
  bool cluster_merge = false;
  /// Dynamic shared memory the kernel is allowed on this device, the same for every call:
  /// decode_mma_smem_bytes plus, where clusters can run (cc >= 9), the largest cluster
  /// receive buffer (decode_cluster_rx_max_bytes). Only decode_mma_config sets it, and every
  /// launch takes it as the kernel's limit (0, the default, would fail the launch).
  std::int64_t smem_limit = 0;
  /// The call runs the small-call kernel (decode_small.cu): a cluster-merge call on an nhd/hnd
  /// cache with splits of at most kSmallMaxWarps * 16 tokens whose CTAs fit one per SM.
  bool small_kernel = false;
  /// Two adjacent head-64 KV heads run as one 128-dim KV head (decode_mma_pairs_heads): the
  /// grid has num_kv_heads / 2 KV heads and the head-128 pipeline, and the cut above is the
  /// one of that paired problem.
  bool pair_heads = false;
  /// A paired plan's smem_limit of the unpaired kernel (the one every unpaired call sets), for
  /// a call whose cache no longer has adjacent heads and runs unpaired (decode_mma_run).
  std::int64_t smem_limit_unpaired = 0;
  /// The merge kernel is launched as a programmatic dependent of the split kernel (cc >= 9):
  /// it launches while the last splits run, loads its metadata and waits for them (every CTA,
  /// so that it never completes before the split kernel).
  bool dependent_launch = false;
  /// PlanOptions::batch_invariant: chunk_tokens is kBatchInvariantChunkTokens, no cluster
  /// merge and no small-call kernel, and the merge kernel folds the splits in a fixed number
  /// of split groups (not one that follows the batch's longest sequence), so a sequence's bits
  /// do not depend on the batch.
  bool batch_invariant = false;
  /// fp8 only: the call runs the previous fp8 instances (decode_mma_stages with tuned =
  /// false: head 128 in 6 stages at 2 CTAs per SM), and the cut above was made for their
  /// slots. Chosen for fp8 head 128 (8 columns) when the 3-CTA cut would need more splits and
  /// is not a work-list call: W1 (64 x 4096) ran 139.1 us in 1 split at 2 CTAs per SM against
  /// 146.7 in the 2 splits the 3-CTA slots call for (H200, 2026-12-02), while batches that
  /// keep their split count (256 x 1022: 164.9 -> 146.6 us) or are skewed (255 x 512 + 1 x
  /// 131072: 213.2 -> 177.2) gain from 3 CTAs per SM. Also set for every fp8 call under
  /// PAGEDATTN_DECODE_FP8_TUNING=0.
  bool fp8_untuned = false;
};

/// Whether the pipelined kernel may run a head-64 problem as pairs of KV heads: where the head
/// stride is 64 elements, KV heads 2j and 2j + 1 of a token are 256 contiguous bytes, exactly
/// a head-128 row. The CTA of pair j puts the query heads of KV head 2j into the MMA
/// columns 0..gqa-1 with dims 64-127 zero, and those of 2j + 1 into columns gqa..2gqa-1 with
/// dims 0-63 zero (a block-diagonal Q^T). Each column's scores sum only the MMA k-steps of its
/// own KV head's 64 dims (not the zero products with the other head, which a non-finite key
/// would make NaN), and of O^T += V^T P^T each column keeps the 64 dims of its own KV head. With a
/// GQA group of at most 4 the 2 gqa columns fit the 8 MMA columns, so the MMAs per K/V byte
/// are those of the unpaired kernel, while each CTA streams twice the bytes through the
/// head-128 pipeline (half the CTAs, each tile's fixed work amortised over 256-byte rows).
/// Needs a cache of the query's dtype (not fp8), an even num_kv_heads, the nhd layout and
/// `heads_adjacent`: key and value head strides
/// of exactly 64 elements (decode_mma_heads_adjacent), as in any dense nhd block, padded pages
/// and blocks interleaved with other tensors included.
bool decode_mma_pairs_heads(const ProblemDesc& problem, bool heads_adjacent);
/// Whether the cache of `args` has nhd layout and key and value head strides equal to
/// head_size (decode_mma_pairs_heads' `heads_adjacent`).
bool decode_mma_heads_adjacent(const AttentionArgs& args);
/// What decode_mma_config assumes without the tensors (select_kernel, `explain`): heads are
/// adjacent in a dense nhd cache (CacheAccess::kNative).
inline bool decode_mma_heads_adjacent(const ProblemDesc& problem) {
  return problem.layout == KVLayout::kNHD && problem.access == CacheAccess::kNative;
}

/// decode_mma_chunk plus the work-item bound, the merge mode and the head pairing, from the
/// plan's problem and device (num_units, max_shared_memory_per_block; clusters need
/// cc_major >= 9). A problem that decode_mma_pairs_heads allows is cut as the paired problem
/// (head 128, half the KV heads, twice the GQA group) unless the unpaired cut takes the
/// small-call kernel or the paired cut would.
/// `batch_invariant` (PlanOptions::batch_invariant): the cut of DecodeMmaConfig::batch_invariant
/// (forced_splits is then ignored).
DecodeMmaConfig decode_mma_config(const ProblemDesc& problem, const DeviceInfo& device,
                                  int forced_splits, bool heads_adjacent,
                                  bool batch_invariant = false);
/// The same with heads_adjacent = decode_mma_heads_adjacent(problem).
inline DecodeMmaConfig decode_mma_config(const ProblemDesc& problem, const DeviceInfo& device,
                                         int forced_splits) {
  return decode_mma_config(problem, device, forced_splits, decode_mma_heads_adjacent(problem));
}
/// The cut `options` ask for (num_splits, batch_invariant) with heads_adjacent as above.
inline DecodeMmaConfig decode_mma_config(const ProblemDesc& problem, const DeviceInfo& device,
                                         const PlanOptions& options) {
  return decode_mma_config(problem, device, options.num_splits, decode_mma_heads_adjacent(problem),
                           options.batch_invariant);
}

/// CTAs per SM that the current CUDA device runs of the split-kernel instance decode_mma_run
/// launches for an unpaired call with head `head_size` (instances 64, 128, 256, and 512 with fp8
/// caches; a masked head counts as its instance, decode_mma_instance_head), GQA group `gqa`, query
/// dtype `q` (fp16/bf16), cache dtype `kv` (the query's or fp8) and `layout`, without the
/// cluster merge's buffer (cudaOccupancyMaxActiveBlocksPerMultiprocessor: registers and shared
/// memory as ptxas built it). decode_mma_slots must count exactly this many per SM on that
/// device, or the plan cuts batches for slots the device does not have (or leaves slots idle):
/// the GPU tests compare the two. 0 for another head size or when a query fails. CUDA builds
/// only.
int decode_mma_device_ctas_per_sm(int head_size, int gqa, DType q, DType kv, KVLayout layout);

/// Workspace bytes: fp32 partial outputs and log-sum-exps per (sequence, split, head).
std::size_t decode_mma_workspace(int num_seqs, int num_splits, int num_heads, int head_size);

/// Launch the decode kernel (and the merge when any sequence has more than one split).
/// Arguments validated and matching the plan; no allocation, no synchronisation.
Status decode_mma_run(const AttentionArgs& args, int block_size, const DecodeMmaConfig& config,
                      void* workspace, Stream stream);

}  // namespace pagedattn::cuda
