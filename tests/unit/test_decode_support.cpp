// Which problems the CUDA decode fast path takes (src/cuda/decode/decode_mma.h,
// decode_mma_rows_supported) and what `explain` says about its instance: grid limits, head
// sizes and their instances (exact or masked), the split layout at block size 1. Host code
// compiled in every build, checked on a synthetic H200.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "pagedattn/pagedattn.h"
#include "src/cuda/common/mma_args.h"
#include "src/cuda/decode/decode_mma.h"
#include "tests/unit/decode_fixtures.h"

namespace pagedattn::cuda {
namespace {

// decode_mma_heads_adjacent reads the cache's strides: dense nhd blocks, padded pages and
// blocks interleaved with other tensors keep two heads in one row; a head-strided view or the
// hnd layout does not.
// The grid holds at most 65535 KV heads (y): beyond, the fast path declines with a reason
// instead of failing the launch. Sequences are not limited: decode_mma_run launches more than
// kDecodeMaxGridSeqs in parts.
TEST(DecodeMmaSupport, GridLimitsOfKvHeadsAndSequences) {
  std::string why;
  EXPECT_TRUE(decode_mma_rows_supported(decode_problem({100}, 65535, 65535, 128), &why)) << why;
  EXPECT_FALSE(decode_mma_rows_supported(decode_problem({100}, 65536, 65536, 128), &why));
  EXPECT_EQ(why, "more than 65535 KV heads");
  EXPECT_TRUE(decode_mma_rows_supported(decode_problem(std::vector<int>(65535, 9), 8, 8, 64), &why))
      << why;
  for (int head : {64, 80, 128})
    EXPECT_TRUE(decode_mma_rows_supported(
        decode_problem(std::vector<int>(200000, 9), 32, 8, head), &why))
        << head << ": " << why;
  // The cut of such a batch is an ordinary grid call (no work list, no cluster, no small
  // kernel), the only kind decode_mma_run launches in parts.
  const DecodeMmaConfig c =
      decode_mma_config(decode_problem(std::vector<int>(70000, 300), 32, 8, 80), synthetic_h200(), 0);
  EXPECT_FALSE(decode_mma_work_list(c.num_splits, 70000));
  EXPECT_FALSE(c.cluster_merge);
  EXPECT_FALSE(c.small_kernel);
}

// One compile-time instance per head size: 64, 80, 96, 112, 128 (GQA <= 16) and 192, 256
// (GQA <= 8) with 16-bit caches, 64/128/256/512 with fp8 caches; the other multiples of 16 from
// 64 to 256 run masked on the next larger maskable instance (16-bit: 192, 256; fp8: 128, 256);
// every other head keeps the tiled kernel with a reason. Heads 80-112 keep 128-element
// shared-memory rows (the swizzle permutes 16-byte chunks in groups of 8), so they take head
// 128's shared memory and CTAs per SM; 192 takes one CTA per SM like 256.
TEST(DecodeMmaSupport, HeadSizesOfTheKernelInstances) {
  std::string why;
  for (int head : {64, 80, 96, 112, 128, 192, 256, 512}) {
    EXPECT_TRUE(decode_mma_head_instance(head)) << head;
    EXPECT_EQ(decode_mma_instance_head(head, 2), head);
    EXPECT_TRUE(decode_mma_supported(decode_problem({100, 3000}, 32, 8, head), &why))
        << head << ": " << why;
    EXPECT_EQ(decode_mma_supported(decode_problem({100, 3000}, 32, 2, head), &why), head <= 128)
        << head << " with GQA 16: " << why;
  }
  EXPECT_EQ(why, "head_size 512 with a GQA ratio above 8");
  EXPECT_FALSE(decode_mma_supported(decode_problem({100}, 32, 2, 256), &why));
  EXPECT_EQ(why, "head_size 256 with a GQA ratio above 8");
  EXPECT_FALSE(decode_mma_supported(decode_problem({100}, 32, 2, 192), &why));
  EXPECT_EQ(why, "head_size 192 with a GQA ratio above 8");
  // Masked 16-bit heads: 144-176 on the head-192 instance, 208-240 on the head-256 one, with
  // their instance's shared memory, CTAs per SM and GQA limit.
  for (int head : {144, 160, 176, 208, 224, 240}) {
    const int inst = head < 192 ? 192 : 256;
    EXPECT_FALSE(decode_mma_head_instance(head)) << head;
    EXPECT_EQ(decode_mma_instance_head(head, 2), inst) << head;
    EXPECT_TRUE(decode_mma_maskable(inst, false));
    EXPECT_TRUE(decode_mma_supported(decode_problem({100, 3000}, 32, 8, head), &why))
        << head << ": " << why;
    EXPECT_EQ(decode_mma_smem_bytes(head), decode_mma_smem_bytes(inst)) << head;
    EXPECT_EQ(decode_mma_slots(head, 4, kH200Units, kH200Smem),
              decode_mma_slots(inst, 4, kH200Units, kH200Smem))
        << head;
    EXPECT_FALSE(decode_mma_supported(decode_problem({100}, 32, 2, head), &why)) << head;
    EXPECT_EQ(why, "head_size " + std::to_string(head) + " (the head-" + std::to_string(inst) +
                       " instance) with a GQA ratio above 8");
  }
  // The hot 16-bit instances (64, 128) and the exact heads between are never masked.
  for (int head : {64, 80, 96, 112, 128, 512}) EXPECT_FALSE(decode_mma_maskable(head, false));
  for (int head : {16, 32, 48, 72, 120, 136, 200, 264, 320, 1024}) {
    EXPECT_EQ(decode_mma_instance_head(head, 2), 0) << head;
    EXPECT_EQ(decode_mma_instance_head(head, 1), 0) << head;
    EXPECT_FALSE(decode_mma_supported(decode_problem({100}, 32, 8, head), &why)) << head;
    EXPECT_EQ(why.rfind("head_size not a multiple of 16 in [64, 256] nor 512", 0), 0u) << why;
  }
  // fp8 caches: instances 64, 128, 256, 512; 80-112 masked on 128, 144-240 on 256.
  ProblemDesc f8 = decode_problem({100, 3000}, 32, 8, 72);
  f8.cache_dtype = DType::kFloat8E4M3;
  EXPECT_FALSE(decode_mma_supported(f8, &why));
  EXPECT_EQ(why.rfind("fp8 cache with head_size not a multiple of 16 in [64, 256] nor 512", 0), 0u)
      << why;
  for (int head = 80; head <= 240; head += 16) {
    if (head == 128) continue;
    const int inst = head < 128 ? 128 : 256;
    f8.head_size = head;
    EXPECT_EQ(decode_mma_instance_head(head, 1), inst) << head;
    EXPECT_TRUE(decode_mma_supported(f8, &why)) << head << ": " << why;
    EXPECT_EQ(decode_mma_smem_bytes(head, 1, 4), decode_mma_smem_bytes(inst, 1, 4)) << head;
    EXPECT_EQ(decode_mma_stages(head, 1, 4), decode_mma_stages(inst, 1, 4)) << head;
    EXPECT_EQ(decode_mma_slots(head, 4, kH200Units, kH200Smem, 0, 1),
              decode_mma_slots(inst, 4, kH200Units, kH200Smem, 0, 1))
        << head;
  }
  for (int head : {128, 256}) EXPECT_TRUE(decode_mma_maskable(head, true));
  // The masked instances the launchers dispatch over: from the lowest head to HEAD - 16.
  EXPECT_EQ(decode_mma_masked_low(128, true), 80);
  EXPECT_EQ(decode_mma_masked_low(256, true), 144);
  EXPECT_EQ(decode_mma_masked_low(192, false), 144);
  EXPECT_EQ(decode_mma_masked_low(256, false), 208);
  EXPECT_EQ(decode_mma_masked_low(128, false), 0);
  EXPECT_EQ(decode_mma_masked_low(64, true), 0);
  for (int head : {64, 512}) EXPECT_FALSE(decode_mma_maskable(head, true));
  f8.head_size = 96;
  f8.num_kv_heads = 2;  // GQA 16 on the head-128 instance
  EXPECT_TRUE(decode_mma_supported(f8, &why)) << why;
  f8.head_size = 192;
  EXPECT_FALSE(decode_mma_supported(f8, &why));
  EXPECT_EQ(why, "head_size 192 (the head-256 instance) with a GQA ratio above 8");
  f8.num_kv_heads = 8;
  for (int head : {64, 128, 256, 512}) {
    f8.head_size = head;
    EXPECT_TRUE(decode_mma_supported(f8, &why)) << head << ": " << why;
  }
  // fp8 head 512: 2 stages of 32-token K + V tiles (16 KB each) and 16 query rows (16-bit),
  // two CTAs per SM (decode_mma_stages, decode_mma_sm_ctas).
  EXPECT_EQ(decode_mma_stages(512, 1), 2);
  // (plus 512 bytes of slack to align the tiles to their 512-byte rows)
  EXPECT_EQ(decode_mma_smem_bytes_for(512, 1, 2), 2 * 2 * 32 * 512 + 16 * 512 * 2 + 512);
  EXPECT_EQ(decode_mma_slots(512, 8, kH200Units, kH200Smem, 0, 1), 2 * kH200Units);
  f8.head_size = 512;
  f8.num_heads = 32;
  f8.num_kv_heads = 2;  // GQA 16
  EXPECT_FALSE(decode_mma_supported(f8, &why));
  EXPECT_EQ(why, "head_size 512 with a GQA ratio above 8");

  for (int head : {80, 96, 112}) {
    EXPECT_EQ(decode_mma_row_elems(head), 128);
    EXPECT_EQ(decode_mma_smem_bytes(head), decode_mma_smem_bytes(128));
    for (int gqa : {4, 16})
      EXPECT_EQ(decode_mma_slots(head, gqa, kH200Units, kH200Smem), 2 * kH200Units) << head;
  }
  for (int head : {64, 128, 192, 256, 512}) EXPECT_EQ(decode_mma_row_elems(head), head);
  // Head 512: 2 warps and 32-token tiles (64 KB of K + V per stage), one CTA per SM.
  EXPECT_EQ(decode_mma_warps(512), 2);
  EXPECT_EQ(decode_mma_tile_tokens(512), 32);
  for (int head : {64, 80, 128, 192, 256}) EXPECT_EQ(decode_mma_tile_tokens(head), kDecodeTileTokens);
  EXPECT_EQ(decode_mma_smem_bytes(512), 3 * 2 * 32 * 1024 + 16 * 512 * 2 + 1024);
  EXPECT_LE(decode_mma_smem_bytes(512), kH200Smem);
  EXPECT_EQ(decode_mma_slots(512, 8, kH200Units, kH200Smem), kH200Units);
  // Its cluster receive buffer does not fit beside the stages: no cluster merge.
  EXPECT_GT(decode_mma_smem_bytes(512) + decode_cluster_rx_max_bytes(512), kH200Smem);
  EXPECT_FALSE(decode_mma_config(decode_problem({3000}, 32, 8, 512), synthetic_h200(), 0).cluster_merge);
  // 3 stages of 64 tokens x 384 bytes for K and V, 16 query rows, 512 bytes of alignment.
  EXPECT_EQ(decode_mma_smem_bytes(192), 3 * 2 * 64 * 384 + 16 * 192 * 2 + 512);
  EXPECT_EQ(decode_mma_slots(192, 8, kH200Units, kH200Smem), kH200Units);
  // The cluster receive buffer still fits beside the stages on an H200.
  for (int head : {80, 96, 112, 192})
    EXPECT_LE(decode_mma_smem_bytes(head) + decode_cluster_rx_max_bytes(head), kH200Smem) << head;
  // The small-call kernel and head pairing exist for 64/128 only: a one-wave call of a head
  // between keeps the pipelined kernel.
  for (int head : {80, 96, 112, 192}) {
    const DecodeMmaConfig c = decode_mma_config(decode_problem({512}, 32, 8, head), synthetic_h200(), 0);
    EXPECT_FALSE(c.small_kernel) << head;
    EXPECT_FALSE(c.pair_heads) << head;
    EXPECT_GT(c.smem_limit, 0) << head;
  }
}

// Split layout at block size 1 (16-bit caches) takes the fast path, run as nhd rows; other
// block sizes not a multiple of 8 and fp8 caches at block size 1 keep the tiled kernel.
TEST(DecodeMmaSupport, SplitLayoutAtBlockSize1RunsAsRows) {
  std::string why;
  for (int head : {64, 80, 128, 256, 512}) {
    ProblemDesc p = decode_problem({300, 5}, 32, 8, head);
    p.layout = KVLayout::kSplit;
    p.block_size = 1;
    EXPECT_TRUE(decode_mma_rows_supported(p, &why)) << head << ": " << why;
    auto c = select_kernel(p, synthetic_h200(), PlanOptions{});
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(c->kernel, KernelId::kCudaDecodeMMA) << c->reason;
    EXPECT_NE(c->reason.find("split layout at block size 1 run by the nhd kernel"),
              std::string::npos)
        << c->reason;
    p.block_size = 7;
    EXPECT_FALSE(decode_mma_rows_supported(p, &why));
    EXPECT_EQ(why, "split layout with block_size % 8 != 0 (other than 1)");
  }
  ProblemDesc f8 = decode_problem({300}, 32, 8, 128);
  f8.layout = KVLayout::kSplit;
  f8.block_size = 1;
  f8.cache_dtype = DType::kFloat8E4M3;
  EXPECT_FALSE(decode_mma_rows_supported(f8, &why));
  EXPECT_EQ(why, "split layout with block_size % 8 != 0");

  // The run-time form: a dense block-size-1 split cache is rows; other strides fall back.
  const std::int64_t heads = 8, d = 128;
  KVCache cache;
  cache.layout = KVLayout::kSplit;
  cache.key = TensorView::strided(nullptr, DType::kBFloat16, {10, heads, d / 8, 1, 8},
                                  {heads * d, d, 8, 8, 1}, Device::cuda(0));
  cache.value = TensorView::strided(nullptr, DType::kBFloat16, {10, heads, d, 1},
                                    {heads * d, d, 1, 1}, Device::cuda(0));
  EXPECT_TRUE(decode_mma_split_as_rows(cache));
  cache.key.dtype = cache.value.dtype = DType::kFloat8E4M3;
  EXPECT_FALSE(decode_mma_split_as_rows(cache));
  cache.key.dtype = cache.value.dtype = DType::kBFloat16;
  // The stride check of a whole call: the value's dim stride (1, the row) is the one stride
  // exempt from the 16-byte rule (round 2 on the H200: every block-size-1 split call fell back
  // to the tiled kernel because the check read it as a misaligned dim stride).
  AttentionArgs a;
  a.query = TensorView::strided(nullptr, DType::kBFloat16, {2, 32, d}, {32 * d, d, 1},
                                Device::cuda(0));
  a.out = a.query;
  a.cache = cache;
  EXPECT_TRUE(decode_mma_aligned_strides(a));
  a.cache.value.strides[0] = heads * d + 4;  // a block stride off 16 bytes
  EXPECT_FALSE(decode_mma_aligned_strides(a));
  a.cache = cache;
  a.cache.key.strides[2] = 16;  // key chunks not adjacent
  EXPECT_FALSE(decode_mma_aligned_strides(a));
  cache.key.shape[3] = cache.value.shape[3] = 16;
  EXPECT_FALSE(decode_mma_split_as_rows(cache));
}

// `explain` names the instance and says why its shared-memory rows are padded.
TEST(DecodeMmaSupport, ExplainNamesTheHeadInstance) {
  for (int head : {80, 96, 112, 192, 512}) {
    PlanOptions o;
    auto c = select_kernel(decode_problem(std::vector<int>(64, 4096), 32, 8, head),
                           synthetic_h200(), o);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    EXPECT_EQ(c->kernel, KernelId::kCudaDecodeMMA) << c->reason;
    EXPECT_NE(c->reason.find("head-" + std::to_string(head) + " instance (" +
                             std::to_string(head / 16) + " k-steps"),
              std::string::npos)
        << c->reason;
    EXPECT_EQ(c->reason.find("shared-memory rows of 128 elements") != std::string::npos,
              head < 128)
        << c->reason;
    EXPECT_NE(c->reason.find(head > 128 ? "1 CTA(s) per SM" : "2 CTA(s) per SM"),
              std::string::npos)
        << c->reason;
    EXPECT_EQ(c->tile_tokens, head == 512 ? 32 : 64);
    EXPECT_EQ(c->threads_per_block, head == 512 ? 64 : 128);
    EXPECT_EQ(c->reason.find("2 warps and 32-token tiles") != std::string::npos, head == 512)
        << c->reason;
  }
  // A masked head: the instance above, and why.
  for (DType kv : {DType::kBFloat16, DType::kFloat8E4M3}) {
    ProblemDesc p = decode_problem({4096}, 32, 8, kv == DType::kBFloat16 ? 160 : 80);
    p.cache_dtype = kv;
    auto m = select_kernel(p, synthetic_h200(), PlanOptions{});
    ASSERT_TRUE(m.ok());
    EXPECT_EQ(m->kernel, KernelId::kCudaDecodeMMA) << m->reason;
    const std::string inst = kv == DType::kBFloat16 ? "head-192 instance" : "head-128 instance";
    EXPECT_NE(m->reason.find(inst), std::string::npos) << m->reason;
    EXPECT_NE(m->reason.find("head " + std::to_string(p.head_size) + " masked on it"),
              std::string::npos)
        << m->reason;
    EXPECT_EQ(m->reason.find("reads one zeroed key chunk") != std::string::npos,
              kv != DType::kBFloat16)
        << m->reason;
  }
  auto t = select_kernel(decode_problem({4096}, 32, 8, 72), synthetic_h200(), PlanOptions{});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->kernel, KernelId::kCudaTiled);
  EXPECT_NE(t->reason.find("decode fast path not used: head_size not a multiple of 16"),
            std::string::npos)
      << t->reason;
}

}  // namespace
}  // namespace pagedattn::cuda
