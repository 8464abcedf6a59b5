// The split choice of the CUDA decode fast path (src/cuda/decode/decode_mma.h): host code compiled in
// every build, checked on a synthetic H200. The cuts of the benchmark workloads are pinned to
// the ones measured in docs/performance.md, and random batches check the invariants the
// kernels rely on: no sequence needs more splits than the workspace holds, the work-list bound
// covers every item, and the cluster merge is chosen only where it was measured to pay.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "pagedattn/pagedattn.h"
#include "src/cuda/common/cache_index.h"
#include "src/cuda/common/mma_args.h"
#include "src/cuda/decode/decode_mma.h"
#include "src/cuda/decode/decode_split.h"
#include "src/cuda/prefill/prefill_mma.h"
#include "src/testing/harness.h"
#include "tests/unit/decode_fixtures.h"
#include "tests/unit/synthetic_device.h"

namespace pagedattn::cuda {
namespace {

/// Splits of one sequence as the kernel would cut it without the max_splits bound.
int kernel_splits(int len, int window, int chunk) {
  return decode_num_splits(len, window, chunk, INT_MAX);
}

TEST(DecodeMmaSplits, BenchmarkWorkloadsGetTheMeasuredCuts) {
  struct Case {
    const char* name;
    std::vector<int> lens;
    int head;
    int splits;
    bool cluster;
  };
  std::vector<int> w6(64, 512);
  w6[0] = 32768;
  auto uniform = [](int n, int len) { return std::vector<int>(n, len); };
  auto skewed32 = [] {
    std::vector<int> v(32, 11603);  // 31 x 11603 + 87370 = 447063 tokens
    v[0] = 87370;
    return v;
  };
  const Case cases[] = {
      {"W1", uniform(64, 4096), 128, 1, false},
      {"W2", uniform(128, 2048), 64, 1, false},
      // One wave (balanced long splits): 32 of 4032 tokens and one of 2048.
      {"W3", uniform(1, 131072), 128, 33, false},
      {"W6", w6, 128, 32, false},
      // Latency-bound: one wave, so the splits merge inside a cluster.
      {"W7", uniform(1, 1024), 128, 8, true},
      // Small batches cut for one wave while the splits stay <= 512 tokens.
      {"batch-1", uniform(1, 4096), 128, 32, false},
      // Two sequences: 16 splits fill the slots (a work-list call, the merge kernel).
      {"batch-2", uniform(2, 4096), 128, 16, false},
      // One CTA per SM, the splits merged in clusters (4 and 2 splits).
      {"batch-4", uniform(4, 4096), 128, 4, true},
      {"batch-8", uniform(8, 4096), 128, 2, true},
      // Not for longer sequences (one CTA per SM would give 4000-token splits, unmeasured):
      // the two-wave cut with the work list.
      {"batch-8 x 8000", uniform(8, 8000), 128, 8, false},
      // One wave again once the one-wave splits are >= 2048 tokens and balanced.
      {"batch-16", uniform(16, 4096), 128, 2, true},
      {"batch-32", uniform(32, 4096), 128, 1, false},
      // Skewed: the one-wave cut would leave the longest sequence unsplit; two waves' worth of
      // splits instead (as T-mooncake-decode: 32 sequences, longest 87370, 447052 in all).
      {"skewed-32", skewed32(), 128, 13, false},
  };
  for (const Case& c : cases) {
    const ProblemDesc p = decode_problem(c.lens, 32, 8, c.head);
    const DeviceInfo info = synthetic_h200();
    const DecodeMmaConfig cfg = decode_mma_config(p, info, 0);
    EXPECT_EQ(cfg.num_splits, c.splits) << c.name;
    EXPECT_EQ(cfg.cluster_merge, c.cluster) << c.name;
    // Clusters need compute capability 9: the same cut merges through the merge kernel.
    const DecodeMmaConfig pre_hopper = decode_mma_config(p, synthetic_h200(kH200Units, 8), 0);
    EXPECT_EQ(pre_hopper.num_splits, c.splits) << c.name;
    EXPECT_FALSE(pre_hopper.cluster_merge) << c.name;
    // select_kernel reports the same cut (explain and bench print it).
    auto choice = select_kernel(p, info, PlanOptions{});
    if (!choice.ok()) {
      // A build without the CUDA backend cannot select CUDA kernels.
      EXPECT_EQ(choice.status().code(), StatusCode::kDeviceUnavailable) << c.name;
      continue;
    }
    EXPECT_EQ(choice->kernel, KernelId::kCudaDecodeMMA) << c.name;
    EXPECT_EQ(choice->num_splits, c.splits) << c.name;
  }
}

TEST(DecodeMmaSplits, ForcedSplitsCutTheLongestSequence) {
  const ProblemDesc p = decode_problem({3000, 1, 700}, 32, 8, 128);
  for (int forced : {1, 2, 3, 5, 8, 47}) {
    const DecodeMmaConfig cfg = decode_mma_config(p, synthetic_h200(), forced);
    EXPECT_EQ(cfg.chunk_tokens % kDecodeTileTokens, 0);
    EXPECT_EQ(cfg.num_splits, forced) << forced;
  }
  // More splits than 64-token tiles: one tile each.
  const DecodeMmaConfig cfg = decode_mma_config(p, synthetic_h200(), 1000);
  EXPECT_EQ(cfg.chunk_tokens, kDecodeTileTokens);
  EXPECT_EQ(cfg.num_splits, (3000 + 63) / 64);
}

// A sliding window is any int32 >= 0; one at least as long as every sequence (up to
// INT32_MAX, which some callers pass for "no window") covers the whole sequence, so the cut
// is that of no window. The window's key range (window + 63 tokens) was formed in int: past
// INT32_MAX - 63 it overflowed to a negative length, and the cut got num_splits <= 0 (a grid
// without splits, or a launch error) for a call the CPU backend runs.
TEST(DecodeMmaSplits, HugeWindowsCutLikeNoWindow) {
  ProblemDesc p = decode_problem({3000, 1, 700}, 32, 8, 128);
  for (int window : {3000, 1 << 30, INT_MAX - 64, INT_MAX - 63, INT_MAX - 1, INT_MAX}) {
    p.sliding_window = window;
    for (int forced : {0, 3}) {
      const DecodeMmaConfig cfg = decode_mma_config(p, synthetic_h200(), forced);
      const DecodeMmaConfig ref = decode_mma_config(decode_problem({3000, 1, 700}, 32, 8, 128),
                                                    synthetic_h200(), forced);
      EXPECT_EQ(cfg.num_splits, ref.num_splits) << "window " << window << " forced " << forced;
      EXPECT_EQ(cfg.chunk_tokens, ref.chunk_tokens) << "window " << window;
      EXPECT_GE(cfg.num_splits, 1) << "window " << window;
      EXPECT_GE(decode_num_splits(3000, window, cfg.chunk_tokens, cfg.num_splits), 1);
    }
  }
}

// Equal sequences whose (sequence, KV head) pairs fit in one wave of CTA slots, whose one-wave
// splits would be >= 2048 tokens and fill the wave, are cut for one wave: never more CTAs than
// slots (a second wave's ramp and tail), and at least a full wave's worth of splits, or 8 when
// the splits merge in a cluster instead (decode_mma_chunk prefers a cluster of 8 to 9-16
// splits).
TEST(DecodeMmaSplits, LongBalancedBatchesFillOneWave) {
  const DeviceInfo info = synthetic_h200();
  int checked = 0;
  for (int head : {64, 128})
    for (int n : {1, 2, 3, 5, 8, 16, 33})
      for (int len : {16384, 70001, 131072}) {
        SCOPED_TRACE("head " + std::to_string(head) + ", " + std::to_string(n) + " x " +
                     std::to_string(len));
        const ProblemDesc p = decode_problem(std::vector<int>(n, len), 32, 8, head);
        const std::int64_t slots = decode_mma_slots(head, 4, kH200Units, kH200Smem);
        const std::int64_t ctas = std::int64_t{n} * 8;
        const std::int64_t one_wave = slots / ctas;
        // Only where one wave is long and balanced (its splits fill >= 80% of the slots).
        if (one_wave < 1 || (len + one_wave - 1) / one_wave < 2048 ||
            ctas * one_wave * 5 < slots * 4)
          continue;
        ++checked;
        const DecodeMmaConfig cfg = decode_mma_config(p, info, 0);
        EXPECT_LE(ctas * cfg.num_splits, slots);
        // The 64-token rounding of the split size may drop the last split.
        const std::int64_t want = one_wave > 8 && one_wave <= 16 ? 8 : one_wave;
        EXPECT_GE(cfg.num_splits, std::max<std::int64_t>(1, want - 1));
      }
  EXPECT_GE(checked, 20);
}

TEST(DecodeMmaSplits, RandomBatchesKeepTheKernelInvariants) {
  std::mt19937 rng(20261129);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const int heads_kv[][2] = {{32, 8}, {16, 16}, {64, 4}, {8, 1}, {40, 5}};
  for (int trial = 0; trial < 3000; ++trial) {
    const int n = pick(0, 3) == 0 ? pick(1, 4) : pick(1, 300);
    const int max_len = 1 << pick(0, 17);
    std::vector<int> lens(n);
    for (int& l : lens) l = pick(1, max_len);
    const int* hk = heads_kv[pick(0, 4)];
    const int head = pick(0, 1) ? 64 : 128;
    ProblemDesc p = decode_problem(lens, hk[0], hk[1], head);
    p.sliding_window = pick(0, 2) == 0 ? pick(1, 5000) : 0;
    const int forced = pick(0, 4) == 0 ? pick(1, 600) : 0;
    const int units = pick(0, 3) == 0 ? pick(1, 200) : kH200Units;
    const DecodeMmaConfig cfg = decode_mma_config(p, synthetic_h200(units), forced);
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + std::to_string(n) + " seqs, max " +
                 std::to_string(p.batch.max_seq_len) + ", window " +
                 std::to_string(p.sliding_window) + ", forced " + std::to_string(forced));
    ASSERT_GE(cfg.chunk_tokens, kDecodeTileTokens);
    ASSERT_EQ(cfg.chunk_tokens % kDecodeTileTokens, 0);
    ASSERT_GE(cfg.num_splits, 1);
    ASSERT_LE(cfg.num_splits, kMaxDecodeSplits);
    std::int64_t items = 0;
    for (int len : lens) {
      const int s = kernel_splits(len, p.sliding_window, cfg.chunk_tokens);
      // The workspace holds num_splits partial rows per sequence: the kernel must never cut a
      // sequence into more.
      ASSERT_LE(s, cfg.num_splits) << "len " << len;
      items += s;
    }
    // The work-list grid launches max_items CTAs per KV head; the bound must cover every item
    // (the CTAs would stride otherwise: correct, but unbalanced).
    EXPECT_GE(cfg.max_items, items);
    EXPECT_LE(cfg.max_items, std::int64_t{n} * cfg.num_splits);
    if (cfg.cluster_merge) {
      EXPECT_FALSE(decode_mma_work_list(cfg.num_splits, n));  // the launcher's first test
      EXPECT_GE(cfg.num_splits, 2);
      EXPECT_LE(cfg.num_splits, kMaxClusterSplits);
      EXPECT_LE(std::int64_t{n} * hk[1] * cfg.num_splits,
                decode_mma_slots(head, hk[0] / hk[1], units, kH200Smem));
    }
    EXPECT_EQ(decode_mma_workspace(n, cfg.num_splits, hk[0], head) > 0, cfg.num_splits > 1);
  }
}

TEST(DecodeMmaSplits, SlotsFollowSharedMemoryAndLaunchBounds) {
  // The occupancy the kernels' launch bounds assume: 2 CTAs of head 128, 4 of head 64 (3 with
  // a GQA group above 8), and the H200's shared memory holds that many.
  EXPECT_EQ(decode_mma_slots(128, 4, kH200Units, kH200Smem), 2 * kH200Units);
  EXPECT_EQ(decode_mma_slots(128, 16, kH200Units, kH200Smem), 2 * kH200Units);
  EXPECT_EQ(decode_mma_slots(64, 4, kH200Units, kH200Smem), 4 * kH200Units);
  EXPECT_EQ(decode_mma_slots(64, 8, kH200Units, kH200Smem), 4 * kH200Units);
  EXPECT_EQ(decode_mma_slots(64, 9, kH200Units, kH200Smem), 3 * kH200Units);
  for (int head : {64, 128})
    for (int gqa : {1, 8, 16})
      EXPECT_LE((decode_mma_smem_bytes(head) + 1024) * decode_mma_reg_ctas(head, gqa),
                kH200Smem + 1024)
          << "head " << head << ", GQA " << gqa;
  // A device whose shared memory holds less than one CTA still counts one per SM; never more
  // than the launch bounds.
  EXPECT_EQ(decode_mma_slots(128, 4, 10, 1024), 10);
  EXPECT_EQ(decode_mma_slots(64, 4, 10, std::int64_t{1} << 30), 40);
  EXPECT_EQ(decode_mma_slots(128, 4, 10, std::int64_t{1} << 30), 20);
}

// The cluster merge: every output element has exactly one combining CTA, and the receive
// buffer the other splits push into never costs the kernel a CTA per SM (so the one-wave test
// of the cluster decision, made with the base shared memory, still holds).
TEST(DecodeMmaSplits, ClusterReceiveBufferKeepsTheCtasPerSm) {
  for (int head : {64, 128})
    for (int gqa = 1; gqa <= 16; ++gqa)
      for (int splits = 2; splits <= kMaxClusterSplits; ++splits) {
        SCOPED_TRACE("head " + std::to_string(head) + " gqa " + std::to_string(gqa) +
                     " splits " + std::to_string(splits));
        const int total = gqa * head;
        const int share = decode_cluster_share(head, gqa, splits);
        EXPECT_EQ(share % 4, 0);
        EXPECT_GE(static_cast<std::int64_t>(share) * splits, total);
        EXPECT_LT(static_cast<std::int64_t>(share - 4) * splits, total);
        const std::int64_t base = decode_mma_smem_bytes(head);
        const std::int64_t rx = decode_cluster_rx_bytes(head, gqa, splits);
        EXPECT_LE(rx, decode_cluster_rx_max_bytes(head));
        const auto per_sm = [&](std::int64_t smem) {
          return std::min<std::int64_t>((kH200Smem + 1024) / (smem + 1024),
                                        decode_mma_reg_ctas(head, gqa));
        };
        EXPECT_EQ(per_sm(base + rx), per_sm(base));
      }
  // The kernel's shared-memory limit: the same for every call on a device, with room for the
  // largest receive buffer where clusters run, and never above the device's limit.
  const ProblemDesc p = decode_problem({1024}, 32, 8, 128);
  const DecodeMmaConfig hopper = decode_mma_config(p, synthetic_h200(), 0);
  EXPECT_TRUE(hopper.cluster_merge);
  EXPECT_EQ(hopper.smem_limit, decode_mma_smem_bytes(128) + decode_cluster_rx_max_bytes(128));
  const DecodeMmaConfig ampere = decode_mma_config(p, synthetic_h200(kH200Units, 8), 0);
  EXPECT_FALSE(ampere.cluster_merge);
  EXPECT_EQ(ampere.smem_limit, decode_mma_smem_bytes(128));
  // Programmatic dependent launch of the merge kernel: compute capability 9 only.
  EXPECT_TRUE(hopper.dependent_launch);
  EXPECT_FALSE(ampere.dependent_launch);
  // A device whose shared memory holds two CTAs of head 128 but only one with the receive
  // buffer: the one-wave test of the cluster decision counts the buffer.
  const std::int64_t base128 = decode_mma_smem_bytes(128);
  const std::int64_t per_sm_smem = 2 * (base128 + 1024) - 1024;
  const DeviceInfo squeezed = testing::synthetic_cuda_device(per_sm_smem, 40, 9);
  bool exercised = false;
  // Forced split counts too: the planner's own cut often takes one CTA per SM.
  for (int i = 0; i < 128 * 9; ++i) {
    const int len = 64 * (1 + i / 9), forced = i % 9 == 0 ? 0 : i % 9;
    const ProblemDesc q = decode_problem({len}, 32, 8, 128);
    const DecodeMmaConfig cfg = decode_mma_config(q, squeezed, forced);
    const std::int64_t ctas = std::int64_t{8} * cfg.num_splits;
    const std::int64_t with_rx = decode_mma_slots(
        128, 4, 40, per_sm_smem, decode_cluster_rx_bytes(128, 4, cfg.num_splits));
    ASSERT_LT(with_rx, decode_mma_slots(128, 4, 40, per_sm_smem)) << len;
    if (cfg.cluster_merge) {
      EXPECT_LE(ctas, with_rx) << len;
    }
    if (cfg.num_splits >= 2 && cfg.num_splits <= kMaxClusterSplits && ctas > with_rx &&
        ctas <= decode_mma_slots(128, 4, 40, per_sm_smem)) {
      EXPECT_FALSE(cfg.cluster_merge) << len;
      exercised = true;
    }
  }
  EXPECT_TRUE(exercised) << "no length put the CTAs between the two slot counts";
  // A cc-9 device whose limit fits the kernel but not the receive buffer: no clusters.
  const DeviceInfo tight = testing::synthetic_cuda_device(decode_mma_smem_bytes(128) + 1024,
                                                          kH200Units, 9);
  const DecodeMmaConfig small = decode_mma_config(p, tight, 0);
  EXPECT_FALSE(small.cluster_merge);
  EXPECT_EQ(small.smem_limit, decode_mma_smem_bytes(128));
}

// The small-call kernel (decode_small.cu) takes exactly the one-wave cluster calls whose
// splits are one 16-token tile per warp (at most 8 warps) on nhd/hnd caches, when one CTA per
// SM holds every CTA of the call; its shared memory always fits its one attribute and the
// device.
TEST(DecodeMmaSplits, SmallCallKernelTakesShortOneWaveClusterCalls) {
  const DeviceInfo h200 = synthetic_h200();
  const ProblemDesc w7 = decode_problem({1024}, 32, 8, 128);
  const DecodeMmaConfig cfg = decode_mma_config(w7, h200, 0);
  EXPECT_TRUE(cfg.cluster_merge);
  EXPECT_EQ(cfg.chunk_tokens, 128);
  EXPECT_TRUE(cfg.small_kernel);
  ProblemDesc split = w7;
  split.layout = KVLayout::kSplit;
  EXPECT_TRUE(decode_mma_config(split, h200, 0).cluster_merge);
  EXPECT_FALSE(decode_mma_config(split, h200, 0).small_kernel);
  EXPECT_FALSE(decode_mma_config(w7, synthetic_h200(kH200Units, 8), 0).small_kernel);
  // 64 CTAs: clusters still fit 40 SMs at two CTAs each, the small kernel's one does not.
  const DecodeMmaConfig few_sms = decode_mma_config(w7, synthetic_h200(40), 0);
  EXPECT_TRUE(few_sms.cluster_merge);
  EXPECT_FALSE(few_sms.small_kernel);
  // Two sequences in 16 splits: a work-list call (decode_mma_run tests that first), so neither
  // the cluster merge nor the small kernel, whatever the waves.
  const DecodeMmaConfig two = decode_mma_config(decode_problem({1024, 1024}, 32, 8, 128), h200, 0);
  EXPECT_EQ(two.num_splits, 16);
  EXPECT_TRUE(decode_mma_work_list(two.num_splits, 2));
  EXPECT_FALSE(two.cluster_merge);
  EXPECT_FALSE(two.small_kernel);
  // batch-2: 512-token cluster splits stay on the pipelined kernel.
  EXPECT_FALSE(decode_mma_config(decode_problem({4096, 4096}, 32, 8, 128), h200, 0).small_kernel);

  int taken = 0;
  for (int head : {64, 128})
    for (int kv_heads : {1, 2, 8})
      for (int gqa : {1, 3, 8, 12, 16})
        for (int forced : {0, 2, 3, 5, 8})
          for (int len = 1; len <= 2200; len += 97) {
            const ProblemDesc p = decode_problem({len, len / 3 + 1}, kv_heads * gqa, kv_heads, head);
            const DecodeMmaConfig c = decode_mma_config(p, h200, forced);
            SCOPED_TRACE("head " + std::to_string(head) + " kv " + std::to_string(kv_heads) +
                         " gqa " + std::to_string(gqa) + " forced " + std::to_string(forced) +
                         " len " + std::to_string(len));
            EXPECT_LE(decode_small_smem_max_bytes(head, gqa) + decode_small_static_smem_bytes(gqa),
                      kH200Smem);
            if (!c.small_kernel) continue;
            ++taken;
            EXPECT_TRUE(c.cluster_merge);
            EXPECT_FALSE(decode_mma_work_list(c.num_splits, 2));
            EXPECT_GE(c.num_splits, 2);
            EXPECT_LE(c.num_splits, kMaxClusterSplits);
            EXPECT_LE(c.chunk_tokens, kSmallMaxWarps * 16);
            EXPECT_GE(static_cast<std::int64_t>(c.chunk_tokens) * c.num_splits, len);
            EXPECT_LE(std::int64_t{2} * kv_heads * c.num_splits, kH200Units);
            EXPECT_LE(decode_small_smem_bytes(head, gqa, c.num_splits),
                      decode_small_smem_max_bytes(head, gqa));
          }
  EXPECT_GT(taken, 50);
}

TEST(DecodeSplitRange, SplitsCoverTheWindowOnceAndStayWithinTheWorkspace) {
  for (int window : {0, 1, 37, 64, 65, 100, 700})
    for (int chunk : {64, 128, 192, 640})
      for (int max_splits : {1, 2, 3, 5, 8, 512})
        for (int len = 0; len <= 1500; ++len) {
          SCOPED_TRACE("len " + std::to_string(len) + " window " + std::to_string(window) +
                       " chunk " + std::to_string(chunk) + " max_splits " +
                       std::to_string(max_splits));
          const int lo = window > 0 ? std::max(0, len - window) : 0;
          const int unclamped = len > 0 ? (len - (lo & ~63) + chunk - 1) / chunk : 0;
          int covered = lo, nsplit = -1;
          for (int split = 0; split < max_splits + 2; ++split) {
            int start, valid_lo, end, n;
            const bool has = decode_split_range(len, window, chunk, max_splits, split, &start,
                                                &valid_lo, &end, &n);
            if (nsplit < 0) nsplit = n;
            ASSERT_EQ(n, nsplit);
            if (!has) {
              ASSERT_GE(split, n);
              continue;
            }
            ASSERT_LT(split, n);
            ASSERT_EQ(start % 64, 0);
            ASSERT_LE(start, valid_lo);
            ASSERT_EQ(valid_lo, covered);  // in order, no gap, no overlap
            ASSERT_LT(valid_lo, end);
            if (split < n - 1) {
              ASSERT_EQ(end, start + chunk);
            }
            // Within the plan (no clamping) this is the cut the kernels made before the bound.
            if (unclamped <= max_splits) {
              ASSERT_EQ(end, std::min(len, start + chunk));
            }
            covered = end;
          }
          ASSERT_EQ(nsplit, std::min(unclamped, max_splits));
          ASSERT_EQ(covered, len > 0 ? len : lo);
          ASSERT_EQ(decode_num_splits(len, window, chunk, max_splits), nsplit);
        }
}

/// nhd views (no memory behind them: the rules read only pointers, shapes and strides).
AttentionArgs nhd_args(std::uintptr_t base) {
  auto at = [&](std::uintptr_t off) { return reinterpret_cast<void*>(base + off); };
  AttentionArgs a;
  a.query = TensorView::contiguous(at(0), DType::kBFloat16, {4, 32, 128}, Device::cuda(0));
  a.out = TensorView::contiguous(at(1 << 20), DType::kBFloat16, {4, 32, 128}, Device::cuda(0));
  a.cache.layout = KVLayout::kNHD;
  a.cache.key = TensorView::contiguous(at(2 << 20), DType::kBFloat16, {64, 16, 8, 128}, Device::cuda(0));
  a.cache.value = TensorView::contiguous(at(4 << 20), DType::kBFloat16, {64, 16, 8, 128}, Device::cuda(0));
  a.block_table = TensorView::contiguous(at(6 << 20), DType::kInt32, {4, 16}, Device::cuda(0));
  return a;
}

TEST(MmaCopyAlignment, StridesPointersAndDecodeIndexWidth) {
  const AttentionArgs ok = nhd_args(0x10000000);
  EXPECT_TRUE(mma_copy_aligned_strides(ok));
  EXPECT_TRUE(mma_copy_aligned_pointers(ok));
  EXPECT_TRUE(decode_mma_aligned(ok));
  EXPECT_TRUE(prefill_mma_aligned(ok));

  // A head stride of 132 elements (264 bytes): 16-byte copies would straddle rows.
  AttentionArgs a = nhd_args(0x10000000);
  a.query.strides[1] = 132;
  a.query.strides[0] = 32 * 132;
  EXPECT_FALSE(mma_copy_aligned_strides(a));
  EXPECT_FALSE(decode_mma_aligned_strides(a));
  EXPECT_FALSE(prefill_mma_aligned_strides(a));
  // ... unless that dimension has extent 1.
  a.query.shape[1] = 1;
  a.query.strides[0] = 128;
  EXPECT_TRUE(mma_copy_aligned_strides(a));

  // An output 8 bytes off a 16-byte boundary.
  a = nhd_args(0x10000000);
  a.out.data = reinterpret_cast<void*>(0x10000000 + (1 << 20) + 8);
  EXPECT_TRUE(mma_copy_aligned_strides(a));
  EXPECT_FALSE(mma_copy_aligned_pointers(a));
  EXPECT_FALSE(decode_mma_aligned(a));
  EXPECT_FALSE(prefill_mma_aligned(a));

  // The decode kernel multiplies cache strides and block-table offsets in 32 bits.
  a = nhd_args(0x10000000);
  a.cache.key.strides[0] = std::int64_t{1} << 31;
  EXPECT_TRUE(mma_copy_aligned_strides(a));
  EXPECT_FALSE(decode_mma_aligned_strides(a));
  a = nhd_args(0x10000000);
  a.block_table.strides[1] = (std::int64_t{1} << 31) / 15 + 1;  // x (16 - 1) columns > INT32_MAX
  EXPECT_FALSE(decode_mma_aligned_strides(a));
  a.block_table.strides[1] = (std::int64_t{1} << 31) / 15 - 1;
  EXPECT_TRUE(decode_mma_aligned_strides(a));
}

// The strides the MMA launchers pass on address the same element as the tiled kernel's
// key_offset / value_offset (which CudaIndexing checks against the tensor strides), for every
// layout, both head sizes and padded pages.
TEST(MmaCacheStrides, AddressTheSameElementsAsTheTiledKernel) {
  for (KVLayout layout : {KVLayout::kSplit, KVLayout::kNHD, KVLayout::kHND})
    for (int head : {64, 128})
      for (std::int64_t pad : {std::int64_t{0}, std::int64_t{64}}) {
        SCOPED_TRACE(std::string(to_string(layout)) + " head " + std::to_string(head) + " pad " +
                     std::to_string(pad));
        const int bs = 16, kvh = 3;
        KVCacheSpec spec{layout, 4, bs, kvh, head, DType::kBFloat16, pad};
        auto cache = make_kv_cache(spec, reinterpret_cast<void*>(256), reinterpret_cast<void*>(512));
        ASSERT_TRUE(cache.ok()) << cache.status().to_string();
        const MmaCacheStrides cs = mma_cache_strides(*cache);
        EXPECT_EQ(cs.num_kv_heads, kvh);
        Strides4 ks{}, vs{};
        for (int i = 0; i < 4; ++i) {
          ks.s[i] = cache->key.strides[i];
          vs.s[i] = cache->value.strides[i];
        }
        const int code = static_cast<int>(layout);
        for (std::int64_t b = 0; b < 4; ++b)
          for (std::int64_t t = 0; t < bs; ++t)
            for (std::int64_t g = 0; g < kvh; ++g)
              for (std::int64_t d = 0; d < head; ++d) {
                const std::int64_t c = d / 8, e = d % 8;
                ASSERT_EQ(b * cs.k_blk + g * cs.k_head + t * cs.k_tok + c * cs.k_chunk + e,
                          key_offset(code, 8, ks, b, t, g, d));
                const std::int64_t v =
                    layout == KVLayout::kSplit
                        ? b * cs.v_blk + g * cs.v_head + d * cs.v_dim + t * cs.v_tok
                        : b * cs.v_blk + g * cs.v_head + t * cs.v_tok + c * cs.v_chunk + e;
                ASSERT_EQ(v, value_offset(code, vs, b, t, g, d));
              }
      }
}

// fill_attention_params copies every shared field, narrowing bt_blk to the struct's type, and
// leaves ALiBi and sinks null when they are absent.
TEST(MmaCacheStrides, CommonFieldsOfTheLaunchParameters) {
  struct Params {
    const void *q, *k, *v;
    void* out;
    float* lse = nullptr;
    std::int64_t q_tok, q_head, o_tok, o_head, l_tok = -1, l_head = -1;
    const int *block_table, *seq_lens, *qsl;
    std::int64_t bt_seq, sl_stride, qsl_stride;
    int bt_blk;
    float softcap = -1.0f;
    int window = -1;
    const float* alibi = nullptr;
    std::int64_t alibi_stride = -1;
    const float* sinks = nullptr;
    std::int64_t sinks_stride = -1;
  };
  AttentionArgs a = nhd_args(0x10000000);
  a.query = TensorView::strided(a.query.data, DType::kBFloat16, {4, 32, 128}, {8192, 256, 1},
                                Device::cuda(0));
  a.block_table = TensorView::strided(a.block_table.data, DType::kInt32, {4, 16}, {48, 3},
                                      Device::cuda(0));
  a.seq_lens = TensorView::strided(reinterpret_cast<void*>(0x20000000), DType::kInt32, {4}, {2},
                                   Device::cuda(0));
  a.query_start_loc = TensorView::strided(reinterpret_cast<void*>(0x20001000), DType::kInt32,
                                          {5}, {2}, Device::cuda(0));
  Params p{};
  p.l_tok = p.l_head = -1;
  fill_attention_params(p, a);
  EXPECT_EQ(p.q, a.query.data);
  EXPECT_EQ(p.q_tok, 8192);
  EXPECT_EQ(p.q_head, 256);
  EXPECT_EQ(p.out, a.out.data);
  EXPECT_EQ(p.o_tok, 32 * 128);
  EXPECT_EQ(p.o_head, 128);
  EXPECT_EQ(p.lse, nullptr);  // not requested: left alone
  EXPECT_EQ(p.l_tok, -1);
  EXPECT_EQ(p.k, a.cache.key.data);
  EXPECT_EQ(p.v, a.cache.value.data);
  EXPECT_EQ(p.block_table, a.block_table.data);
  EXPECT_EQ(p.bt_seq, 48);
  EXPECT_EQ(p.bt_blk, 3);
  EXPECT_EQ(p.seq_lens, a.seq_lens.data);
  EXPECT_EQ(p.sl_stride, 2);
  EXPECT_EQ(p.qsl, a.query_start_loc.data);
  EXPECT_EQ(p.qsl_stride, 2);
  EXPECT_EQ(p.softcap, a.params.softcap);
  EXPECT_EQ(p.window, a.params.sliding_window);
  EXPECT_EQ(p.alibi, nullptr);  // absent: left alone
  EXPECT_EQ(p.alibi_stride, -1);
  EXPECT_EQ(p.sinks, nullptr);
  EXPECT_EQ(p.sinks_stride, -1);
  std::vector<float> lse(4 * 32);
  a.lse = TensorView::strided(lse.data(), DType::kFloat32, {4, 32}, {64, 2}, Device::cuda(0));
  fill_attention_params(p, a);
  EXPECT_EQ(p.lse, lse.data());
  EXPECT_EQ(p.l_tok, 64);
  EXPECT_EQ(p.l_head, 2);
  std::vector<float> slopes(64), sinks(32);
  a.params.softcap = 30.0f;
  a.params.sliding_window = 100;
  a.params.alibi_slopes =
      TensorView::strided(slopes.data(), DType::kFloat32, {32}, {2}, Device::cuda(0));
  a.params.sinks = TensorView::strided(sinks.data(), DType::kFloat32, {32}, {1}, Device::cuda(0));
  fill_attention_params(p, a);
  EXPECT_EQ(p.softcap, 30.0f);
  EXPECT_EQ(p.window, 100);
  EXPECT_EQ(p.alibi, slopes.data());
  EXPECT_EQ(p.alibi_stride, 2);
  EXPECT_EQ(p.sinks, sinks.data());
  EXPECT_EQ(p.sinks_stride, 1);
}

// Head 64 runs as pairs of KV heads (decode_mma_pairs_heads) exactly where two heads of a token
// are one 256-byte row and the 2 x GQA columns fit the 8 MMA columns; the paired cut is the
// one of the paired problem (head 128, half the KV heads), and calls small enough for the
// small-call kernel stay on it, unpaired.
TEST(DecodeMmaSplits, PairsHeadsOfHead64WhereTwoHeadsAreOneRow) {
  const DeviceInfo h200 = synthetic_h200();
  const ProblemDesc w2 = decode_problem(std::vector<int>(128, 2048), 32, 8, 64);
  const DecodeMmaConfig c = decode_mma_config(w2, h200, 0);
  EXPECT_TRUE(c.pair_heads);
  EXPECT_EQ(c.num_splits, 1);
  ProblemDesc paired = w2;
  paired.head_size = 128;
  paired.num_kv_heads = 4;
  const DecodeMmaConfig as_paired = decode_mma_config(paired, h200, 0);
  EXPECT_EQ(c.chunk_tokens, as_paired.chunk_tokens);
  EXPECT_EQ(c.smem_limit, as_paired.smem_limit);  // the head-128 kernel's one limit
  // The limit an unpaired run of this plan sets: the head-64 kernel's, as on unpaired plans.
  EXPECT_EQ(c.smem_limit_unpaired, decode_mma_config(w2, h200, 0, false).smem_limit);
  // Not paired: heads not adjacent, other layouts, head 128, GQA above 4, odd KV heads.
  EXPECT_FALSE(decode_mma_config(w2, h200, 0, false).pair_heads);
  ProblemDesc strided = w2;
  strided.access = CacheAccess::kStrided;
  EXPECT_FALSE(decode_mma_config(strided, h200, 0).pair_heads);  // without the tensors: unknown
  EXPECT_TRUE(decode_mma_config(strided, h200, 0, true).pair_heads);
  for (KVLayout layout : {KVLayout::kHND, KVLayout::kSplit}) {
    ProblemDesc other = w2;
    other.layout = layout;
    EXPECT_FALSE(decode_mma_config(other, h200, 0, true).pair_heads);
  }
  EXPECT_FALSE(decode_mma_config(decode_problem({2048, 2048}, 32, 8, 128), h200, 0).pair_heads);
  EXPECT_FALSE(decode_mma_config(decode_problem({2048, 2048}, 40, 8, 64), h200, 0).pair_heads);
  EXPECT_FALSE(decode_mma_config(decode_problem({2048, 2048}, 20, 5, 64), h200, 0).pair_heads);
  EXPECT_TRUE(decode_mma_config(decode_problem({2048, 2048}, 2, 2, 64), h200, 0).pair_heads);
  // A one-wave call with short splits keeps the small-call kernel.
  const DecodeMmaConfig small = decode_mma_config(decode_problem({1024}, 32, 8, 64), h200, 0);
  EXPECT_TRUE(small.small_kernel);
  EXPECT_FALSE(small.pair_heads);
  // explain's reason says which (a build without the CUDA backend selects no CUDA kernel).
  auto w2_choice = select_kernel(w2, h200, PlanOptions{});
  auto small_choice = select_kernel(decode_problem({1024}, 32, 8, 64), h200, PlanOptions{});
  if (w2_choice.ok() && small_choice.ok()) {
    EXPECT_NE(w2_choice->reason.find("KV heads paired"), std::string::npos) << w2_choice->reason;
    EXPECT_NE(small_choice->reason.find("KV heads not paired (the small-call kernel"),
              std::string::npos)
        << small_choice->reason;
  } else {
    EXPECT_EQ(w2_choice.status().code(), StatusCode::kDeviceUnavailable);
  }
  // A device without room for the head-128 stages: unpaired.
  const DeviceInfo small_smem =
      testing::synthetic_cuda_device(decode_mma_smem_bytes(128) - 1024, kH200Units, 9);
  EXPECT_FALSE(decode_mma_config(w2, small_smem, 0).pair_heads);

  // The dpair cases of src/testing/cases.cpp reach every merge mode of the pipelined kernel
  // paired, with their own windows and padding (the skipped rows and the mixed batch's prefill
  // chunk count as sequences, not as decode rows).
  struct Case {
    std::vector<int> lens;
    int other_seqs, heads, kv_heads, forced, window;
    bool padded, work_list, cluster;
    int splits;
  };
  const std::vector<int> dl = {3000, 1, 64, 65, 700, 17};
  const Case cases[] = {
      {dl, 1, 32, 8, 0, 0, false, true, false, 10},                 // dpair1
      {{900, 300, 1}, 0, 16, 8, 3, 0, false, false, true, 3},       // dpair2
      {{5000, 3, 2100}, 0, 12, 4, 0, 0, true, true, false, 40},     // dpair3
      {dl, 1, 8, 8, 1, 100, false, false, false, 1},                // dpair4: direct store
      {{3000, 130, 1500}, 1, 32, 8, 12, 0, false, true, false, 12},  // dpair5
      {{3000}, 0, 24, 8, 0, 0, false, false, false, 47},            // dpair6: merge kernel
      {{3000, 700}, 1, 8, 2, 0, 0, true, true, false, 47},          // dpair7: mixed
  };
  for (const Case& k : cases) {
    ProblemDesc p = decode_problem(k.lens, k.heads, k.kv_heads, 64);
    p.batch.num_seqs += k.other_seqs;
    p.sliding_window = k.window;
    if (k.padded) p.access = CacheAccess::kStrided;
    const DecodeMmaConfig cfg = decode_mma_config(p, h200, k.forced, true);
    SCOPED_TRACE("heads " + std::to_string(k.heads) + " forced " + std::to_string(k.forced));
    EXPECT_TRUE(cfg.pair_heads);
    EXPECT_EQ(cfg.num_splits, k.splits);
    EXPECT_EQ(decode_mma_work_list(cfg.num_splits, p.batch.num_seqs), k.work_list);
    EXPECT_EQ(cfg.cluster_merge, k.cluster);
    EXPECT_FALSE(cfg.small_kernel);
    // Padded pages: select_kernel, which sees no strides, does not pair (plan_attention then
    // reports the paired cut).
    EXPECT_EQ(decode_mma_config(p, h200, k.forced).pair_heads, !k.padded);
  }
}

TEST(DecodeMmaSplits, HeadsAdjacentFollowsTheHeadStride) {
  auto args_with = [](KVLayout layout, std::initializer_list<std::int64_t> shape,
                      std::initializer_list<std::int64_t> strides) {
    AttentionArgs a;
    a.cache.layout = layout;
    a.cache.key = TensorView::strided(nullptr, DType::kBFloat16, shape, strides, Device::cuda(0));
    a.cache.value = a.cache.key;
    return a;
  };
  EXPECT_TRUE(decode_mma_heads_adjacent(
      args_with(KVLayout::kNHD, {10, 16, 8, 64}, {16 * 8 * 64, 8 * 64, 64, 1})));
  // Padded pages, and vLLM's [blocks, 2, block, heads, dim] cache with K and V interleaved.
  EXPECT_TRUE(decode_mma_heads_adjacent(
      args_with(KVLayout::kNHD, {10, 16, 8, 64}, {16 * 8 * 64 + 64, 8 * 64, 64, 1})));
  EXPECT_TRUE(decode_mma_heads_adjacent(
      args_with(KVLayout::kNHD, {10, 16, 8, 64}, {2 * 16 * 8 * 64, 8 * 64, 64, 1})));
  // Every other head of a 16-head cache.
  EXPECT_FALSE(decode_mma_heads_adjacent(
      args_with(KVLayout::kNHD, {10, 16, 8, 64}, {16 * 16 * 64, 16 * 64, 128, 1})));
  EXPECT_FALSE(decode_mma_heads_adjacent(
      args_with(KVLayout::kHND, {10, 8, 16, 64}, {16 * 8 * 64, 16 * 64, 64, 1})));
  AttentionArgs mixed =
      args_with(KVLayout::kNHD, {10, 16, 8, 64}, {16 * 8 * 64, 8 * 64, 64, 1});
  mixed.cache.value =
      TensorView::strided(nullptr, DType::kBFloat16, {10, 16, 8, 64}, {16 * 16 * 64, 16 * 64, 128, 1},
                          Device::cuda(0));
  EXPECT_FALSE(decode_mma_heads_adjacent(mixed));
}

}  // namespace
}  // namespace pagedattn::cuda
