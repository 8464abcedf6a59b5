// Host-side rules of the CUDA decode fast path (decode_mma.h): support, alignment, the split
// choice and the workspace. Compiled in every build (with or without CUDA), so that selection,
// `explain` and the unit tests see the one rule the kernels run with.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "src/cuda/common/mma_args.h"
#include "src/cuda/decode/decode_mma.h"

namespace pagedattn::cuda {

namespace {

constexpr int kMinChunkTokens = 64;
/// CTA-slot "waves" the split choice aims at. Measured on the H200 (W1-W6, 1/2/4/8 waves):
/// two waves is best: longer CTAs pay their pipeline fill and epilogue less often, and two
/// waves still let the hardware scheduler even out unequal lengths.
constexpr int kWaves = 2;
/// Split lengths at or below which, and at or above which (when balanced), a small batch is
/// cut for one wave (decode_mma_chunk).
constexpr int kShortChunkTokens = 512;
constexpr int kLongChunkTokens = 2048;

}  // namespace

bool decode_mma_fp8_tuned() {
  static const bool tuned = [] {
    const char* e = std::getenv("PAGEDATTN_DECODE_FP8_TUNING");
    return e == nullptr || std::string(e) != "0";
  }();
  return tuned;
}

bool decode_merge_early_exit() {
  static const bool early = [] {
    const char* e = std::getenv("PAGEDATTN_DECODE_MERGE_EARLY_EXIT");
    return e == nullptr || std::string(e) != "0";
  }();
  return early;
}

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
  const bool fp8 = decode_mma_kv_bytes(pr) == 1;
  if (pr.cache_dtype != pr.q_dtype && !fp8)
    return no("cache dtype is neither the query dtype nor fp8 e4m3/e5m2");
  // One compile-time instance per head size, or the next larger maskable one
  // (decode_mma_instance_head).
  const int inst = decode_mma_instance_head(pr.head_size, fp8 ? 1 : 2);
  if (inst == 0)
    return no(fp8 ? "fp8 cache with head_size not a multiple of 16 in [64, 256] nor 512 (the "
                    "decode kernel's instances: 64, 128, 256, 512, with masked dims between)"
                  : "head_size not a multiple of 16 in [64, 256] nor 512 (the decode kernel's "
                    "instances: 64, 80, 96, 112, 128, 192, 256, 512, with masked dims between)");
  if (pr.gqa_ratio() > 16) return no("GQA ratio above 16");
  if (inst > 128 && pr.gqa_ratio() > 8) {
    if (why_not)
      *why_not = "head_size " + std::to_string(pr.head_size) +
                 (inst != pr.head_size ? " (the head-" + std::to_string(inst) + " instance)" : "") +
                 " with a GQA ratio above 8";
    return false;
  }
  // Block size 1 (16-bit caches): a block is one token whose key chunks and value dims are
  // contiguous, the nhd kernel's rows (decode_mma_split_as_rows).
  if (pr.layout == KVLayout::kSplit && pr.block_size % 8 != 0 && !(pr.block_size == 1 && !fp8))
    return no(fp8 ? "split layout with block_size % 8 != 0"
                  : "split layout with block_size % 8 != 0 (other than 1)");
  // An fp8 value chunk is 16 tokens of one head dim.
  if (fp8 && pr.layout == KVLayout::kSplit && pr.block_size % 16 != 0)
    return no("fp8 split layout with block_size % 16 != 0");
  // The grid's y dimension (grid mode: one CTA row per KV head; the small kernel likewise).
  if (pr.num_kv_heads > 65535) return no("more than 65535 KV heads");
  return true;
}

bool decode_mma_split_as_rows(const KVCache& cache) {
  const bool b16 = cache.key.dtype == DType::kFloat16 || cache.key.dtype == DType::kBFloat16;
  return cache.layout == KVLayout::kSplit && b16 && cache.key.ndim == 5 &&
         cache.value.ndim == 4 && cache.key.shape[3] == 1 && cache.value.shape[3] == 1 &&
         cache.key.shape[4] == 8;
}

bool decode_mma_aligned_strides(const AttentionArgs& args) {
  // Split layout at block size 1 runs as rows: the key's 8-element chunks and the value's dims
  // must follow each other (dense within the block, as KVCacheSpec allocates them). The
  // value's dim stride is then 1 (the row itself), the one stride exempt from the 16-byte
  // rule below; every other stride must keep 16-byte copies aligned.
  if (decode_mma_split_as_rows(args.cache)) {
    if (args.cache.key.strides[2] != 8 || args.cache.value.strides[2] != 1) return false;
    AttentionArgs rows = args;
    rows.cache.value.shape[2] = 1;  // only for the check: the dim stride is the row's
    if (!mma_copy_aligned_strides(rows)) return false;
  } else if (!mma_copy_aligned_strides(args)) {
    return false;
  }
  // fp8 caches: 16 bytes are 16 elements.
  const DType kv = args.cache.key.dtype;
  if (kv == DType::kFloat8E4M3 || kv == DType::kFloat8E5M2)
    for (const TensorView* v : {&args.cache.key, &args.cache.value})
      for (int d = 0; d + 1 < v->ndim; ++d)
        if (v->shape[d] > 1 && v->strides[d] % 16 != 0) return false;
  // The kernel multiplies cache strides in 32 bits (products are formed in 64 bits) and
  // block-table offsets (block index x column stride) in 32 bits.
  for (const TensorView* v : {&args.cache.key, &args.cache.value})
    for (int d = 0; d < v->ndim; ++d)
      if (v->strides[d] < 0 || v->strides[d] > INT32_MAX) return false;
  const TensorView& bt = args.block_table;
  if (bt.ndim == 2 && bt.shape[1] > 1 &&
      (bt.strides[1] < 0 || bt.strides[1] > INT32_MAX / (bt.shape[1] - 1)))
    return false;
  return true;
}

bool decode_mma_aligned(const AttentionArgs& args) {
  return mma_copy_aligned_pointers(args) && decode_mma_aligned_strides(args);
}

std::int64_t decode_mma_slots(int head_size, int gqa, int num_units,
                              std::int64_t max_smem_per_block, std::int64_t extra_smem_bytes,
                              int kv_bytes, bool tuned) {
  const std::int64_t smem =
      decode_mma_smem_bytes(head_size, kv_bytes, gqa, tuned) + extra_smem_bytes;
  const std::int64_t per_sm = std::clamp<std::int64_t>(
      (max_smem_per_block + 1024) / (smem + 1024), 1,
      decode_mma_sm_ctas(head_size, gqa, kv_bytes, kv_bytes != 1 || tuned));
  return std::max<std::int64_t>(1, num_units) * per_sm;
}

namespace {

int chunk_for(const ProblemDesc& pr, int num_units, std::int64_t max_smem_per_block,
              int forced_splits, int* num_splits, bool tuned) {
  const std::int64_t slots = decode_mma_slots(pr.head_size, pr.gqa_ratio(), num_units,
                                              max_smem_per_block, 0, decode_mma_kv_bytes(pr),
                                              tuned);
  // Key range of the longest sequence as the kernel cuts it: [lo rounded down to 64, seq_len).
  std::int64_t longest = std::max(1, pr.batch.max_seq_len);
  std::int64_t total = std::max<std::int64_t>(1, pr.batch.total_kv_tokens);
  if (pr.sliding_window > 0) {
    // In 64 bits: a window near INT32_MAX (as long as "no window") must not wrap negative.
    longest = std::min<std::int64_t>(
        longest, std::int64_t{pr.sliding_window} + kDecodeTileTokens - 1);
    total = std::min<std::int64_t>(total, longest * std::max(1, pr.batch.num_decode_seqs));
  }
  auto round_up = [](std::int64_t v, std::int64_t m) { return (v + m - 1) / m * m; };
  std::int64_t chunk;
  if (forced_splits > 0) {
    chunk = round_up((longest + forced_splits - 1) / forced_splits, kDecodeTileTokens);
  } else {
    const std::int64_t target = std::max<std::int64_t>(
        kMinChunkTokens, total * pr.num_kv_heads / (slots * kWaves));
    std::int64_t n = std::max<std::int64_t>(1, (longest + target / 2) / target);
    const std::int64_t ctas = std::int64_t{std::max(1, pr.batch.num_decode_seqs)} * pr.num_kv_heads;
    // When every (sequence, KV head) fits in one wave of CTA slots, a one-wave cut can beat
    // the two-wave one in two cases (measured on the H200, 8 KV heads, batches of 4096-token
    // sequences unless said):
    //  - its splits are short: a two-wave cut of a small batch gets CTAs only a few tiles long,
    //    whose pipeline fill and merge dominate (batch 1: 26.0 -> 21.2 us, 2: 34.0 -> 29.1,
    //    4: 43.3 -> 39.5);
    //  - its splits are long and balanced (the longest CTA within 25% of an even share of all
    //    the work): a second wave then costs a second ramp and tail (batch 16: 86.4 -> 79.0,
    //    32: 145.6 -> 137.5, one sequence of 131072: 145.0 -> 142.7).
    // Between the two (batch 8: 1024-token one-wave splits, 56.5 -> 60.1 us) and for skewed
    // batches (one-wave splits as long as the longest sequence allows: a 32-sequence trace
    // batch went 455 -> 1105 us) the two-wave cut stays.
    if (ctas <= slots && ctas * n > slots) {
      const std::int64_t n1 = std::max<std::int64_t>(1, slots / ctas);
      const std::int64_t chunk1 = (longest + n1 - 1) / n1;
      const bool balanced = chunk1 * slots * 4 <= total * pr.num_kv_heads * 5;
      if (chunk1 <= kShortChunkTokens || (chunk1 >= kLongChunkTokens && balanced)) n = n1;
    }
    // One CTA per SM (head 128, and head 64 as pairs) where the cut so far has splits shorter
    // than kLongChunkTokens: when units / ctas gives 2 to kMaxClusterSplits splits that merge
    // in a cluster (not a work-list call), of at most kLongChunkTokens (the measured range;
    // longer one-CTA-per-SM splits lost 2-3% to two CTAs per SM, see below), and the cut is
    // balanced (the longest CTA within 25% of an even share of the work over the SMs). One
    // CTA's 3 stages keep enough bytes in flight for its SM; the shorter cuts pay the merge
    // kernel (work-list calls) or, filling the second CTA slot of every SM with clusters of 4
    // or more splits, can need a second wave (clusters are placed within a GPC). Measured on the H200 after the dependent-launch
    // merge (8 KV heads x 4096 tokens): batch 8 in 2 splits 41.0 us against 47.4 (8 splits,
    // work list) and 50.6 (4 splits, clusters of 4, 256 CTAs); batch 4 in 4 splits 25.7
    // against 27.6 (8 splits, work list). Not for batch 2 (8 splits of two sequences make a
    // work-list call: 16 splits measured 19.8 against 20.4 us), nor where the splits are long
    // already (batch 16: 1 split 70.6 against 69.3 in 2; W3: 16 splits 134.1 against 130.3
    // in 33).
    const std::int64_t per_sm = std::max(1, num_units) / ctas;
    if (pr.head_size == 128 && per_sm >= 2 && per_sm <= kMaxClusterSplits &&
        (longest + n - 1) / n < kLongChunkTokens &&
        !decode_mma_work_list(static_cast<int>(per_sm), pr.batch.num_seqs)) {
      const std::int64_t chunk_u = (longest + per_sm - 1) / per_sm;
      if (chunk_u <= kLongChunkTokens &&
          chunk_u * std::max(1, num_units) * 4 <= total * pr.num_kv_heads * 5)
        n = per_sm;
    }
    // A single sequence whose CTAs fit in one wave of slots is latency-bound: with at most
    // kMaxClusterSplits splits they merge inside a thread-block cluster (no merge kernel and no
    // partial results in global memory), which is worth more than twice the splits. Several
    // sequences in 8 or more splits make a work-list call, which never merges in a cluster.
    if (n > kMaxClusterSplits && n <= 2 * kMaxClusterSplits && ctas * n <= slots &&
        !decode_mma_work_list(kMaxClusterSplits, pr.batch.num_seqs))
      n = kMaxClusterSplits;
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

}  // namespace

int decode_mma_chunk(const ProblemDesc& pr, int num_units, std::int64_t max_smem_per_block,
                     int forced_splits, int* num_splits) {
  return chunk_for(pr, num_units, max_smem_per_block, forced_splits, num_splits,
                   decode_mma_fp8_tuned());
}

bool decode_mma_pairs_heads(const ProblemDesc& pr, bool heads_adjacent) {
  return heads_adjacent && pr.head_size == 64 && pr.layout == KVLayout::kNHD &&
         pr.cache_dtype == pr.q_dtype &&
         pr.num_kv_heads >= 2 && pr.num_kv_heads % 2 == 0 && pr.gqa_ratio() <= 4;
}

bool decode_mma_heads_adjacent(const AttentionArgs& args) {
  const KVCache& c = args.cache;
  if (c.layout != KVLayout::kNHD || c.key.ndim != 4 || c.value.ndim != 4) return false;
  const std::int64_t head = c.key.shape[3];
  return c.key.strides[2] == head && c.value.strides[2] == head && c.key.strides[3] == 1 &&
         c.value.strides[3] == 1;
}

namespace {

DecodeMmaConfig config_for(const ProblemDesc& pr, const DeviceInfo& device, int forced_splits,
                           bool invariant, bool tuned) {
  DecodeMmaConfig c;
  const bool fp8 = decode_mma_kv_bytes(pr) == 1;
  c.fp8_untuned = fp8 && !tuned;
  if (invariant) {
    // Fixed split points: the kernel cuts [lo rounded down to 64, len) every chunk tokens.
    std::int64_t longest = std::max(1, pr.batch.max_seq_len);
    if (pr.sliding_window > 0)
      longest = std::min<std::int64_t>(longest,
                                       std::int64_t{pr.sliding_window} + kDecodeTileTokens - 1);
    const std::int64_t bound = (longest + kMaxDecodeSplits - 1) / kMaxDecodeSplits;
    const std::int64_t chunk = std::max<std::int64_t>(
        kBatchInvariantChunkTokens, (bound + kDecodeTileTokens - 1) / kDecodeTileTokens *
                                        kDecodeTileTokens);
    c.chunk_tokens = static_cast<int>(chunk);
    c.num_splits = static_cast<int>((longest + chunk - 1) / chunk);
    c.batch_invariant = true;
  } else {
    c.chunk_tokens = chunk_for(pr, device.num_units, device.max_shared_memory_per_block,
                               forced_splits, &c.num_splits, tuned);
  }
  // Each sequence has ceil(range / chunk) <= range / chunk + 1 splits, and the ranges add up
  // to at most total_kv_tokens.
  const std::int64_t seqs = std::max(1, pr.batch.num_decode_seqs);
  c.max_items = std::min<std::int64_t>(seqs * c.num_splits,
                                       pr.batch.total_kv_tokens / c.chunk_tokens + seqs);
  c.max_items = std::max<std::int64_t>(1, c.max_items);
  // Thread-block clusters need compute capability 9.0; decided here, once per plan, rather
  // than by a device query per run.
  const std::int64_t ctas = seqs * pr.num_kv_heads * c.num_splits;
  const int kvb = decode_mma_kv_bytes(pr);
  const std::int64_t base = decode_mma_smem_bytes(pr.head_size, kvb, pr.gqa_ratio(), tuned);
  const std::int64_t with_rx = base + decode_cluster_rx_max_bytes(pr.head_size);
  const bool clusters = device.cc_major >= 9 && with_rx <= device.max_shared_memory_per_block;
  c.smem_limit = clusters ? with_rx : base;
  c.dependent_launch = device.cc_major >= 9;
  // A work-list call merges through the merge kernel whatever its wave count.
  c.cluster_merge = !invariant && clusters && c.num_splits >= 2 &&
                    c.num_splits <= kMaxClusterSplits &&
                    !decode_mma_work_list(c.num_splits, pr.batch.num_seqs) &&
                    ctas <= decode_mma_slots(pr.head_size, pr.gqa_ratio(), device.num_units,
                                             device.max_shared_memory_per_block,
                                             decode_cluster_rx_bytes(pr.head_size,
                                                                     pr.gqa_ratio(),
                                                                     c.num_splits),
                                             kvb, tuned);
  // The small-call kernel reads 16-bit caches only (fp8 calls keep the pipelined kernel).
  c.small_kernel = c.cluster_merge && pr.layout != KVLayout::kSplit && kvb == 2 &&
                   (pr.head_size == 64 || pr.head_size == 128) &&
                   c.chunk_tokens <= kSmallMaxWarps * 16 && ctas <= device.num_units &&
                   decode_small_smem_max_bytes(pr.head_size, pr.gqa_ratio()) +
                           decode_small_static_smem_bytes(pr.gqa_ratio()) <=
                       device.max_shared_memory_per_block;
  return c;
}

}  // namespace

DecodeMmaConfig decode_mma_config(const ProblemDesc& pr, const DeviceInfo& device,
                                  int forced_splits, bool heads_adjacent, bool batch_invariant) {
  const bool tuned = decode_mma_fp8_tuned();
  DecodeMmaConfig c = config_for(pr, device, forced_splits, batch_invariant, tuned);
  // fp8 head 128, 8 columns: the 3-CTA instance's slots can call for more splits than the
  // 2-CTA one's (W1: 2 against 1); outside work-list calls the extra merge and the shorter
  // CTAs cost more than the third CTA per SM gains (DecodeMmaConfig::fp8_untuned).
  // Not for a masked head: its instance runs the tuned stages only (launch_fp8_layout).
  if (tuned && !batch_invariant && decode_mma_kv_bytes(pr) == 1 && pr.head_size == 128 &&
      pr.gqa_ratio() <= 8 && !decode_mma_work_list(c.num_splits, pr.batch.num_seqs)) {
    const DecodeMmaConfig old = config_for(pr, device, forced_splits, false, false);
    if (old.num_splits < c.num_splits) c = old;
  }
  // The small-call kernel has no paired form; a call small enough for it stays unpaired.
  if (c.small_kernel || !decode_mma_pairs_heads(pr, heads_adjacent) ||
      decode_mma_smem_bytes(128) > device.max_shared_memory_per_block)
    return c;
  ProblemDesc paired = pr;
  paired.head_size = 128;
  paired.num_kv_heads = pr.num_kv_heads / 2;
  DecodeMmaConfig cp = config_for(paired, device, forced_splits, batch_invariant, true);
  if (cp.small_kernel) return c;
  cp.pair_heads = true;
  cp.smem_limit_unpaired = c.smem_limit;
  return cp;
}

std::size_t decode_mma_workspace(int num_seqs, int num_splits, int num_heads, int head_size) {
  if (num_splits <= 1) return 0;
  const std::size_t rows = static_cast<std::size_t>(num_seqs) * num_splits * num_heads;
  const std::size_t lse_bytes = (rows * sizeof(float) + 255) / 256 * 256;
  return lse_bytes + rows * head_size * sizeof(float);
}

}  // namespace pagedattn::cuda
