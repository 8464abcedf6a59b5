// The decode fast path's newer formats (src/cuda/decode/decode_mma.h): fp8 caches, head 256 and
// the batch-invariant cut, checked on a synthetic H200 without a GPU (test_decode_select.cpp
// has the split choice of the 16-bit kernels).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "pagedattn/pagedattn.h"
#include "src/cuda/common/mma_args.h"
#include "src/cuda/decode/decode_mma.h"
#include "src/cuda/decode/decode_split.h"
#include "tests/unit/decode_fixtures.h"
#include "tests/unit/synthetic_device.h"

namespace pagedattn::cuda {
namespace {

// fp8 caches on every instance head (64, 128, 256) and the heads masked on them (80, 96, 192),
// not head 32 (below the smallest instance), every layout and block size.
TEST(DecodeMmaSupport, Fp8CachesOfEveryHeadEveryLayout) {
  const DType q_types[] = {DType::kFloat16, DType::kBFloat16};
  const DType kv_types[] = {DType::kFloat8E4M3, DType::kFloat8E5M2};
  for (DType q : q_types)
    for (DType kv : kv_types)
      for (int head : {32, 64, 80, 96, 128, 192, 256})
        for (KVLayout layout : {KVLayout::kNHD, KVLayout::kHND, KVLayout::kSplit})
          for (int bs : {1, 7, 8, 16, 32}) {
            ProblemDesc p = decode_problem({300, 5}, 32, 8, head);
            p.q_dtype = q;
            p.cache_dtype = kv;
            p.layout = layout;
            p.block_size = bs;
            std::string why;
            const bool want = head != 32 && (layout != KVLayout::kSplit || bs % 16 == 0);
            EXPECT_EQ(decode_mma_rows_supported(p, &why), want)
                << to_string(q) << " " << to_string(kv) << " head " << head << " "
                << to_string(layout) << " bs " << bs << ": " << why;
            if (!want && head != 32) {
              EXPECT_EQ(why, bs % 8 != 0 ? "split layout with block_size % 8 != 0"
                                         : "fp8 split layout with block_size % 16 != 0");
            }
            if (want) {
              // Never the small-call kernel (16-bit caches only), never paired heads.
              const DeviceInfo d = synthetic_h200();
              for (int len : {1, 64, 100, 640, 4096}) {
                ProblemDesc one = p;
                one.batch = decode_problem({len}, 32, 8, head).batch;
                const DecodeMmaConfig c = decode_mma_config(one, d, 0);
                EXPECT_FALSE(c.small_kernel) << len;
                EXPECT_FALSE(c.pair_heads) << len;
                EXPECT_EQ(c.smem_limit,
                          decode_mma_smem_bytes(head, 1) + decode_cluster_rx_max_bytes(head));
              }
            }
          }
  // fp32 queries and mismatched 16-bit caches stay on the general path.
  ProblemDesc p = decode_problem({300}, 32, 8, 128);
  p.cache_dtype = DType::kFloat16;
  std::string why;
  EXPECT_FALSE(decode_mma_rows_supported(p, &why));
  EXPECT_EQ(why, "cache dtype is neither the query dtype nor fp8 e4m3/e5m2");
  p.q_dtype = DType::kFloat32;
  p.cache_dtype = DType::kFloat8E4M3;
  EXPECT_FALSE(decode_mma_rows_supported(p, &why));
  EXPECT_EQ(why, "query dtype is not fp16/bf16");
}

TEST(DecodeMmaSupport, Head256WithGqaUpTo8) {
  for (DType kv : {DType::kBFloat16, DType::kFloat8E4M3})
    for (int kv_heads : {1, 2, 4, 8, 16, 32}) {
      ProblemDesc p = decode_problem({4096, 100}, 32, kv_heads, 256);
      p.cache_dtype = kv;
      std::string why;
      const bool want = 32 / kv_heads <= 8;
      EXPECT_EQ(decode_mma_rows_supported(p, &why), want) << kv_heads << ": " << why;
      if (!want) {
        EXPECT_EQ(why, 32 / kv_heads > 16 ? "GQA ratio above 16"
                                          : "head_size 256 with a GQA ratio above 8");
        continue;
      }
      // One CTA per SM for 16-bit caches (192 KB of stages), two for fp8 (the registers of
      // 2 x 128 threads at up to 255 each fit an SM), never the small-call kernel, the
      // cluster buffer within the device's shared memory.
      EXPECT_EQ(decode_mma_slots(256, 32 / kv_heads, kH200Units, kH200Smem, 0,
                                 decode_mma_kv_bytes(p)),
                (is_fp8(kv) ? 2 : 1) * kH200Units);
      for (int len : {1, 100, 700, 4096, 131072}) {
        ProblemDesc one = p;
        one.batch = decode_problem({len}, 32, kv_heads, 256).batch;
        const DecodeMmaConfig c = decode_mma_config(one, synthetic_h200(), 0);
        EXPECT_FALSE(c.small_kernel) << len;
        EXPECT_LE(c.smem_limit, kH200Smem) << len;
        EXPECT_EQ(c.smem_limit, decode_mma_smem_bytes(256, decode_mma_kv_bytes(p)) +
                                    decode_cluster_rx_max_bytes(256));
      }
    }
  // 512-byte rows (16-bit head 256) align the tiles to 512 bytes.
  EXPECT_EQ(decode_mma_smem_bytes(256), 3 * 2 * 64 * 512 + 16 * 256 * 2 + 512);
  EXPECT_EQ(decode_mma_smem_bytes(256, 1), 3 * 2 * 64 * 256 + 16 * 256 * 2 + 256);
}

TEST(DecodeMmaSplits, BatchInvariantCutIsFixedInTokens) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 400);
    std::vector<int> lens(static_cast<std::size_t>(n));
    for (int& l : lens) l = 1 + static_cast<int>(rng() % (rng() % 4 == 0 ? 200000 : 5000));
    const int head = trial % 3 == 0 ? 64 : trial % 3 == 1 ? 128 : 256;
    ProblemDesc p = decode_problem(lens, 32, 8, head);
    if (trial % 4 == 1) p.cache_dtype = DType::kFloat8E4M3;
    for (int units : {132, 40, 7})
      for (int cc : {8, 9}) {
        const DeviceInfo d = synthetic_h200(units, cc);
        PlanOptions o;
        o.batch_invariant = true;
        o.num_splits = trial % 5;  // ignored
        const DecodeMmaConfig c = decode_mma_config(p, d, o);
        EXPECT_TRUE(c.batch_invariant);
        EXPECT_EQ(c.chunk_tokens, kBatchInvariantChunkTokens);
        EXPECT_EQ(c.num_splits,
                  (p.batch.max_seq_len + kBatchInvariantChunkTokens - 1) / kBatchInvariantChunkTokens);
        EXPECT_FALSE(c.cluster_merge);
        EXPECT_FALSE(c.small_kernel);
        // Head pairing follows the problem's shape only, not the batch.
        EXPECT_EQ(c.pair_heads, decode_mma_pairs_heads(p, true) &&
                                    decode_mma_smem_bytes(128) <= kH200Smem);
        // Every sequence of any length up to the longest: its splits as the kernel cuts them
        // start at multiples of the fixed chunk.
        for (int len : lens) {
          int start = 0, lo = 0, end = 0, ns = 0;
          ASSERT_TRUE(decode_split_range(len, 0, c.chunk_tokens, c.num_splits, 0, &start, &lo,
                                         &end, &ns));
          EXPECT_EQ(ns, (len + kBatchInvariantChunkTokens - 1) / kBatchInvariantChunkTokens);
        }
      }
  }
  // Alone, the same sequence has the same cut (one sequence: no cluster merge either).
  const DecodeMmaConfig one =
      decode_mma_config(decode_problem({3000}, 32, 8, 128), synthetic_h200(), PlanOptions{0, 0, 0, true});
  EXPECT_EQ(one.chunk_tokens, kBatchInvariantChunkTokens);
  EXPECT_EQ(one.num_splits, 3);
  EXPECT_FALSE(one.cluster_merge);
}

TEST(DecodeMmaSplits, Fp8StagesAndCtasPerSmFollowTheHalfSizeRows) {
  // fp8 head 128, 8 columns: 4 stages, 3 CTAs per SM (launch bound 3, 70 KB each).
  EXPECT_EQ(decode_mma_stages(128, 1, 4), 4);
  EXPECT_EQ(decode_mma_smem_bytes(128, 1, 4), 4 * 2 * 64 * 128 + 16 * 128 * 2 + 256);
  EXPECT_EQ((kH200Smem + 1024) / (decode_mma_smem_bytes(128, 1, 4) + 1024), 3);
  EXPECT_EQ(decode_mma_bound_ctas(128, 1, true, 4), 3);
  EXPECT_EQ(decode_mma_slots(128, 4, kH200Units, kH200Smem, 0, 1), 3 * kH200Units);
  // 16 columns: 6 stages at 2 CTAs per SM (the accumulators of 16 columns need the registers).
  EXPECT_EQ(decode_mma_stages(128, 1, 16), 6);
  EXPECT_EQ(decode_mma_smem_bytes(128, 1, 16), 6 * 2 * 64 * 128 + 16 * 128 * 2 + 256);
  EXPECT_EQ(decode_mma_bound_ctas(128, 2, true, 6), 2);
  EXPECT_EQ(decode_mma_slots(128, 16, kH200Units, kH200Smem, 0, 1), 2 * kH200Units);
  // Head 64: 3 stages, the same 4 / 3 CTAs per SM as 16-bit head 64.
  EXPECT_EQ(decode_mma_smem_bytes(64, 1, 8), 3 * 2 * 64 * 64 + 16 * 64 * 2 + 256);
  EXPECT_EQ(decode_mma_smem_bytes(64, 1, 16), 3 * 2 * 64 * 64 + 16 * 64 * 2 + 256);
  for (int gqa : {1, 4, 8, 16})
    EXPECT_EQ(decode_mma_slots(64, gqa, kH200Units, kH200Smem, 0, 1),
              decode_mma_slots(64, gqa, kH200Units, kH200Smem));
  // 16-bit caches keep their stages and slots.
  EXPECT_EQ(decode_mma_smem_bytes(128), decode_mma_smem_bytes(128, 2, 16));
  EXPECT_EQ(decode_mma_stages(128, 2, 4), kDecodeStages);
  EXPECT_EQ(decode_mma_slots(128, 4, kH200Units, kH200Smem), 2 * kH200Units);
  // The previous tuning (PAGEDATTN_DECODE_FP8_TUNING=0): 6 / 3 stages, 2 / 4 CTAs per SM,
  // head 256 counted at 1.
  EXPECT_EQ(decode_mma_stages(128, 1, 4, false), 6);
  EXPECT_EQ(decode_mma_stages(64, 1, 4, false), 3);
  EXPECT_EQ(decode_mma_sm_ctas(128, 4, 1, false), 2);
  EXPECT_EQ(decode_mma_sm_ctas(256, 4, 1, false), 1);
  // Every instance's shared memory fits the CTAs per SM it is planned at.
  for (int head : {64, 128, 256})
    for (int gqa : {1, 4, 8, 16}) {
      if (head == 256 && gqa > 8) continue;
      for (int kvb : {1, 2}) {
        const std::int64_t per_sm = decode_mma_slots(head, gqa, 1, kH200Smem, 0, kvb);
        EXPECT_LE(per_sm * (decode_mma_smem_bytes(head, kvb, gqa) + 1024), kH200Smem + 1024)
            << head << " " << gqa << " " << kvb;
        EXPECT_LE(per_sm, decode_mma_sm_ctas(head, gqa, kvb));
      }
    }
  // W1 with an fp8 cache: the 3-CTA slots (396) would cut it in 2 splits, the 2-CTA ones in
  // 1: the plan takes the previous instance (measured faster). 256 x 1022 keeps 1 split at 3
  // CTAs per SM, and a skewed batch (a work-list call) takes the 3-CTA cut.
  ProblemDesc f8 = decode_problem(std::vector<int>(64, 4096), 32, 8, 128);
  f8.cache_dtype = DType::kFloat8E4M3;
  const DecodeMmaConfig b = decode_mma_config(f8, synthetic_h200(), 0);
  EXPECT_EQ(b.num_splits, 1);
  EXPECT_TRUE(b.fp8_untuned);
  EXPECT_EQ(b.smem_limit, decode_mma_smem_bytes(128, 1, 4, false) + decode_cluster_rx_max_bytes(128));
  ProblemDesc even = decode_problem(std::vector<int>(256, 1022), 32, 8, 128);
  even.cache_dtype = DType::kFloat8E4M3;
  const DecodeMmaConfig e = decode_mma_config(even, synthetic_h200(), 0);
  EXPECT_EQ(e.num_splits, 1);
  EXPECT_FALSE(e.fp8_untuned);
  std::vector<int> lens(255, 512);
  lens.push_back(131072);
  ProblemDesc skew = decode_problem(lens, 32, 8, 128);
  skew.cache_dtype = DType::kFloat8E4M3;
  const DecodeMmaConfig k = decode_mma_config(skew, synthetic_h200(), 0);
  EXPECT_FALSE(k.fp8_untuned);
  EXPECT_EQ(k.num_splits, 50);
}

TEST(MmaCopyAlignment, Fp8CachesNeedStridesOf16Elements) {
  AttentionArgs a;
  a.query = TensorView::strided(nullptr, DType::kBFloat16, {4, 8, 128}, {1024, 128, 1},
                                Device::cuda(0));
  a.out = a.query;
  a.cache.layout = KVLayout::kNHD;
  a.cache.key = TensorView::strided(nullptr, DType::kFloat8E4M3, {10, 16, 2, 128},
                                    {16 * 2 * 128, 2 * 128, 128, 1}, Device::cuda(0));
  a.cache.value = a.cache.key;
  EXPECT_TRUE(decode_mma_aligned_strides(a));
  // A block stride of 8 elements more: 16-byte aligned for bf16, not for fp8.
  a.cache.value = TensorView::strided(nullptr, DType::kFloat8E4M3, {10, 16, 2, 128},
                                      {16 * 2 * 128 + 8, 2 * 128, 128, 1}, Device::cuda(0));
  EXPECT_FALSE(decode_mma_aligned_strides(a));
  a.cache.value = TensorView::strided(nullptr, DType::kFloat8E4M3, {10, 16, 2, 128},
                                      {16 * 2 * 128 + 16, 2 * 128, 128, 1}, Device::cuda(0));
  EXPECT_TRUE(decode_mma_aligned_strides(a));
}

}  // namespace
}  // namespace pagedattn::cuda
