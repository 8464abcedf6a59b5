// Selection of the CUDA tensor-core prefill kernel (src/cuda/prefill/prefill_mma.h): its support rules,
// sizing and row-tile count are host code compiled in every build, and select_kernel is
// checked on synthetic devices (an H200 and smaller shared-memory limits). No GPU needed, and
// select_kernel's CUDA half is host code too (src/cuda/backend/choose_config.cpp): the same
// answers with or without the CUDA backend.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "pagedattn/pagedattn.h"
#include "src/cuda/decode/decode_mma.h"
#include "src/cuda/prefill/prefill_mma.h"
#include "tests/unit/synthetic_device.h"

namespace pagedattn::cuda {
namespace {

constexpr std::int64_t kH200Smem = testing::kH200SharedMemoryPerBlock;
using testing::synthetic_cuda_device;

/// Two 512-token prefill chunks and 96 decodes, Llama-3-8B-like heads (32/8, head 128, bf16).
ProblemDesc mixed_problem() {
  ProblemDesc p;
  p.device = Device::cuda(0);
  p.num_heads = 32;
  p.num_kv_heads = 8;
  p.head_size = 128;
  p.q_dtype = p.cache_dtype = DType::kBFloat16;
  p.layout = KVLayout::kNHD;
  p.block_size = 16;
  p.num_blocks = 100000;
  p.access = CacheAccess::kNative;
  p.batch.num_seqs = 98;
  p.batch.num_decode_seqs = 96;
  p.batch.num_prefill_seqs = 2;
  p.batch.num_tokens = 96 + 2 * 512;
  p.batch.max_query_len = 512;
  p.batch.max_seq_len = 4096;
  p.batch.total_kv_tokens = 98 * 2048;
  return p;
}

TEST(PrefillMmaSelect, SupportedProblems) {
  for (int head : {64, 128})
    for (DType dt : {DType::kFloat16, DType::kBFloat16})
      for (KVLayout layout : {KVLayout::kSplit, KVLayout::kNHD, KVLayout::kHND})
        for (int kv_heads : {32, 8, 4, 2, 1})  // GQA 1, 4, 8, 16 and MQA (32)
          for (int bs : {1, 16, 544, 2048}) {
            if (layout == KVLayout::kSplit && bs % 8 != 0) continue;
            ProblemDesc p = mixed_problem();
            p.head_size = head;
            p.q_dtype = p.cache_dtype = dt;
            p.layout = layout;
            p.num_kv_heads = kv_heads;
            p.block_size = bs;
            std::string why;
            EXPECT_TRUE(prefill_mma_supported(p, kH200Smem, &why))
                << "head " << head << " " << to_string(dt) << " " << to_string(layout) << " gqa "
                << p.gqa_ratio() << " bs " << bs << ": " << why;
          }
  // GQA 5 (40 / 8) and a window / softcap / ALiBi / sinks / LSE problem.
  ProblemDesc p = mixed_problem();
  p.num_heads = 40;
  p.sliding_window = 100;
  p.softcap = 30.0f;
  p.alibi = p.sinks = p.lse = true;
  EXPECT_TRUE(prefill_mma_supported(p, kH200Smem, nullptr));
}

TEST(PrefillMmaSelect, UnsupportedProblemsSayWhy) {
  struct Case {
    const char* what;
    void (*edit)(ProblemDesc*);
    const char* fragment;
  };
  const Case cases[] = {
      {"cpu", [](ProblemDesc* p) { p->device = Device::cpu(); }, "not a CUDA device"},
      {"decode only",
       [](ProblemDesc* p) {
         p->batch.num_prefill_seqs = 0;
         p->batch.max_query_len = 1;
       },
       "no prefill chunks"},
      {"fp32", [](ProblemDesc* p) { p->q_dtype = p->cache_dtype = DType::kFloat32; }, "fp16/bf16"},
      {"fp8 cache", [](ProblemDesc* p) { p->cache_dtype = DType::kFloat8E4M3; }, "cache dtype"},
      {"head 96", [](ProblemDesc* p) { p->head_size = 96; }, "head_size"},
      {"head 256", [](ProblemDesc* p) { p->head_size = 256; }, "head_size"},
      {"split bs 12",
       [](ProblemDesc* p) {
         p->layout = KVLayout::kSplit;
         p->block_size = 12;
       },
       "block_size % 8"},
  };
  for (const Case& c : cases) {
    ProblemDesc p = mixed_problem();
    c.edit(&p);
    std::string why;
    EXPECT_FALSE(prefill_mma_supported(p, kH200Smem, &why)) << c.what;
    EXPECT_NE(why.find(c.fragment), std::string::npos) << c.what << ": " << why;
  }
  // A device too small for two pipeline stages of head 128 (64 KiB + ids).
  std::string why;
  EXPECT_FALSE(prefill_mma_supported(mixed_problem(), 48 * 1024, &why));
  EXPECT_NE(why.find("shared memory"), std::string::npos) << why;
}

TEST(PrefillMmaSelect, StagesFitTheSharedMemoryLimit) {
  EXPECT_EQ(prefill_mma_stages(64, kH200Smem), 4);
  EXPECT_EQ(prefill_mma_stages(128, kH200Smem), 3);
  // Two CTAs (head 128) / three CTAs (head 64) per SM on an H200 (228 KiB per SM, 1 KiB
  // reserved per CTA).
  EXPECT_LE(2 * (prefill_mma_smem_bytes(128, 3) + 1024), 228 * 1024);
  EXPECT_LE(3 * (prefill_mma_smem_bytes(64, 4) + 1024), 228 * 1024);
  for (std::int64_t limit : {std::int64_t{101376}, std::int64_t{65536}, std::int64_t{49152},
                             std::int64_t{16384}})
    for (int head : {64, 128}) {
      const int st = prefill_mma_stages(head, limit);
      if (st == 0) {
        EXPECT_GT(prefill_mma_smem_bytes(head, 2), limit);
      } else {
        EXPECT_GE(st, 2);
        EXPECT_LE(prefill_mma_smem_bytes(head, st), limit) << head << " " << limit;
      }
    }
}

TEST(PrefillMmaSelect, RowTilesFlattenTheGqaGroup) {
  // query_len 1, 0, 17, 2, 64: with GQA 4 the rows are 4, 0, 68, 8, 256.
  const std::int32_t qsl[] = {0, 1, 1, 18, 20, 84};
  EXPECT_EQ(prefill_mma_row_tiles(qsl, 1, 5, 4, 1), 1 + 0 + 2 + 1 + 4);
  EXPECT_EQ(prefill_mma_row_tiles(qsl, 1, 5, 4, 2), 0 + 0 + 2 + 1 + 4);
  EXPECT_EQ(prefill_mma_row_tiles(qsl, 1, 5, 1, 2), 0 + 0 + 1 + 1 + 1);
  EXPECT_EQ(prefill_mma_row_tiles(qsl, 1, 5, 64, 2), 0 + 0 + 17 + 2 + 64);
  // Strided query_start_loc (every other element).
  const std::int32_t strided[] = {0, -7, 1, -7, 1, -7, 18, -7, 20, -7, 84};
  EXPECT_EQ(prefill_mma_row_tiles(strided, 2, 5, 5, 2), (17 * 5 + 63) / 64 + 1 + 5);
  EXPECT_EQ(prefill_mma_workspace(5), 24u);
}

TEST(PrefillMmaSelect, SelectKernelRoutesPrefillRows) {
  const DeviceInfo info = synthetic_cuda_device();
  // Host code in every build (src/cuda/backend/choose_config.cpp): the same decision with or
  // without the CUDA backend.
  auto c = select_kernel(mixed_problem(), info);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->kernel, KernelId::kCudaTiled);  // the fallback for unaligned tensors
  EXPECT_TRUE(c->prefill_rows_mma) << c->reason;
  EXPECT_TRUE(c->decode_rows_fast_path) << c->reason;
  EXPECT_NE(c->reason.find("tensor-core prefill kernel"), std::string::npos) << c->reason;
  EXPECT_NE(c->reason.find("decode fast path"), std::string::npos) << c->reason;
  EXPECT_LE(c->shared_memory_bytes, info.max_shared_memory_per_block);
  // The fallback's single split is the planner's, not the caller's.
  EXPECT_EQ(c->reason.find("forced by options"), std::string::npos) << c->reason;
  EXPECT_NE(c->reason.find("1 KV split (a fallback of the kernels above"), std::string::npos)
      << c->reason;
  // Batch-invariant: the decode rows' cut is the one they get alone.
  PlanOptions bi;
  bi.batch_invariant = true;
  auto cb = select_kernel(mixed_problem(), info, bi);
  ASSERT_TRUE(cb.ok());
  ASSERT_TRUE(cb->decode_rows_fast_path) << cb->reason;
  EXPECT_NE(cb->reason.find("decode fast path (batch-invariant: split points every " +
                            std::to_string(kBatchInvariantChunkTokens) + " tokens"),
            std::string::npos)
      << cb->reason;
  PlanOptions forced;
  forced.num_splits = 1;
  auto cf = select_kernel(mixed_problem(), info, forced);
  ASSERT_TRUE(cf.ok());
  EXPECT_NE(cf->reason.find("forced by options"), std::string::npos) << cf->reason;

  // A GQA ratio (32) the decode path does not take today: the prefill kernel takes every row
  // (and says so); a decode path that grows to take it keeps the decode rows.
  ProblemDesc p = mixed_problem();
  p.num_heads = 64;
  p.num_kv_heads = 2;
  c = select_kernel(p, info);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->prefill_rows_mma) << c->reason;
  if (!c->decode_rows_fast_path) {
    EXPECT_NE(c->reason.find("decode rows run on it too"), std::string::npos) << c->reason;
    EXPECT_EQ(c->num_splits, 1) << c->reason;
    // Batch-invariant: the decode rows stay on the tiled kernel with its fixed split cut (as
    // alone), so the plan keeps the tiled kernel's splits.
    PlanOptions inv;
    inv.batch_invariant = true;
    p.batch.max_seq_len = 9000;
    auto ci = select_kernel(p, info, inv);
    ASSERT_TRUE(ci.ok()) << ci.status().to_string();
    EXPECT_TRUE(ci->prefill_rows_mma) << ci->reason;
    EXPECT_NE(ci->reason.find("decode rows run on the tiled kernel first with its fixed split "
                              "cut"),
              std::string::npos)
        << ci->reason;
    EXPECT_EQ(ci->num_splits, (9000 + 2047) / 2048) << ci->reason;
  }
  // No decode rows.
  p = mixed_problem();
  p.batch.num_decode_seqs = 0;
  p.batch.num_seqs = 2;
  c = select_kernel(p, info);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->prefill_rows_mma) << c->reason;
  EXPECT_FALSE(c->decode_rows_fast_path);

  // Decode-only batches keep the decode fast path.
  p = mixed_problem();
  p.batch.num_prefill_seqs = 0;
  p.batch.max_query_len = 1;
  p.batch.num_tokens = 96;
  c = select_kernel(p, info);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->kernel, KernelId::kCudaDecodeMMA);
  EXPECT_FALSE(c->prefill_rows_mma);
}

TEST(PrefillMmaSelect, SelectKernelExplainsWhyNot) {
  const DeviceInfo info = synthetic_cuda_device();
  struct Case {
    const char* what;
    ProblemDesc problem;
    PlanOptions options;
    const char* fragment;
  };
  std::vector<Case> cases;
  {
    // fp8 caches run on the Hopper kernel (its producer converts them); without it,
    // prefill_mma says why not.
    Case c{"fp8 cache", mixed_problem(), {}, "cache dtype differs"};
    c.problem.cache_dtype = DType::kFloat8E4M3;
    c.options.no_wgmma_prefill = true;
    cases.push_back(c);
  }
  {
    // Head 96 runs masked on the Hopper kernel's head-128 instance; without it, prefill_mma
    // (heads 64 and 128 only) says why not.
    Case c{"head 96", mixed_problem(), {}, "head_size is not 64 or 128"};
    c.problem.head_size = 96;
    c.options.no_wgmma_prefill = true;
    cases.push_back(c);
  }
  {
    Case c{"forced tile", mixed_problem(), {}, "forced"};
    c.options.tile_tokens = 16;
    cases.push_back(c);
  }
  {
    Case c{"forced splits", mixed_problem(), {}, "forced"};
    c.options.num_splits = 3;
    cases.push_back(c);
  }
  for (const Case& c : cases) {
    auto k = select_kernel(c.problem, info, c.options);
    ASSERT_TRUE(k.ok()) << c.what << ": " << k.status().to_string();
    EXPECT_EQ(k->kernel, KernelId::kCudaTiled) << c.what;
    EXPECT_FALSE(k->prefill_rows_mma) << c.what;
    EXPECT_NE(k->reason.find("tensor-core prefill kernel not used"), std::string::npos)
        << c.what << ": " << k->reason;
    EXPECT_NE(k->reason.find(c.fragment), std::string::npos) << c.what << ": " << k->reason;
  }
  // fp8 caches take the warp-specialised Hopper kernel, which says how it converts them.
  for (DType kv : {DType::kFloat8E4M3, DType::kFloat8E5M2}) {
    ProblemDesc f8 = mixed_problem();
    f8.cache_dtype = kv;
    auto k8 = select_kernel(f8, info);
    ASSERT_TRUE(k8.ok()) << k8.status().to_string();
    EXPECT_TRUE(k8->prefill_rows_wgmma && k8->prefill_rows_wgmma_ws) << k8->reason;
    EXPECT_NE(k8->reason.find(std::string(to_string(kv)) +
                              " rows loaded by the producer into registers"),
              std::string::npos)
        << k8->reason;
  }
  // A 48 KiB device: head 64 still fits two stages, head 128 does not.
  ProblemDesc p = mixed_problem();
  auto k = select_kernel(p, synthetic_cuda_device(48 * 1024));
  ASSERT_TRUE(k.ok()) << k.status().to_string();
  EXPECT_FALSE(k->prefill_rows_mma);
  EXPECT_LE(k->shared_memory_bytes, 48 * 1024);
  p.head_size = 64;
  k = select_kernel(p, synthetic_cuda_device(48 * 1024));
  ASSERT_TRUE(k.ok()) << k.status().to_string();
  EXPECT_TRUE(k->prefill_rows_mma) << k->reason;
  EXPECT_LE(k->shared_memory_bytes, 48 * 1024);
}

}  // namespace
}  // namespace pagedattn::cuda
