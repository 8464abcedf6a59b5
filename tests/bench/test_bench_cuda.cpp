// `pagedattn bench`'s runner on a GPU (bench/runner.h): a row is planned, its cache memory that
// no call may read is set to NaN, one call is checked against the oracle (--check full) and
// then timed. Every layout, cache dtype and feature of --config must pass the check on the
// kernels the dispatcher chooses, including skewed batches that split one sequence. Skipped
// without a GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bench/runner.h"
#include "pagedattn/pagedattn.h"

namespace pagedattn::bench {
namespace {

bool have_gpu() { return built_with_cuda() && query_device(Device::cuda(0)).ok(); }

Workload base(KVLayout layout, DType dtype, DType kv_dtype, int head) {
  Workload w;
  w.name = std::string(to_string(layout)) + "_" + to_string(kv_dtype) + "_h" + std::to_string(head);
  w.num_heads = 16;
  w.num_kv_heads = 4;
  w.head_size = head;
  w.block_size = 16;
  w.layout = layout;
  w.dtype = dtype;
  w.kv_dtype = kv_dtype;
  w.seq_lens = {17, 3000, 1, 333};  // partial last blocks, one long sequence
  w.scale = 6.0f * default_scale(head);
  return w;
}

RunOptions full_check() {
  RunOptions r;
  r.check = CheckMode::kFull;
  return r;
}

const cuda::bench::TimingOptions kQuick{1, 3, cuda::bench::L2Flush::kNone};

void expect_passes(const Workload& w, const PlanOptions& plan = {}) {
  auto r = run_workload(w, 0, kQuick, /*ceiling_gbps=*/1000.0, /*seed=*/7, plan, full_check());
  ASSERT_TRUE(r.ok()) << w.name << ": " << r.status().to_string();
  EXPECT_EQ(r->check.mode, CheckMode::kFull) << w.name;
  EXPECT_TRUE(r->check.pass) << w.name << " on " << to_string(r->choice.kernel) << ": "
                             << r->check.detail;
  EXPECT_GT(r->check.elements, 0) << w.name;
  EXPECT_GT(r->median_us, 0) << w.name;
  EXPECT_EQ(r->iters, 3) << w.name;
  EXPECT_EQ(r->bytes, useful_bytes(w)) << w.name;
}

TEST(CudaBenchRunner, CheckPassesInEveryLayoutAndCacheDtype) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device present";
  for (KVLayout layout : {KVLayout::kNHD, KVLayout::kHND, KVLayout::kSplit})
    for (int head : {64, 128, 80})
      for (DType kv : {DType::kBFloat16, DType::kFloat8E4M3, DType::kFloat8E5M2})
        expect_passes(base(layout, DType::kBFloat16, kv, head));
  expect_passes(base(KVLayout::kNHD, DType::kFloat16, DType::kFloat16, 128));
}

TEST(CudaBenchRunner, CheckPassesWithFeaturesPaddingPrefillAndForcedSplits) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device present";
  Workload w = base(KVLayout::kNHD, DType::kBFloat16, DType::kBFloat16, 128);
  w.softcap = 30.0f;
  w.sliding_window = 700;
  w.alibi = true;
  w.sinks = true;
  w.page_pad = 40;
  expect_passes(w);
  w.lse = true;
  w.query_lens = {1, 64, 0, 333};  // a prefill chunk, a skipped sequence, a whole prompt
  expect_passes(w);
  Workload fp8 = base(KVLayout::kSplit, DType::kBFloat16, DType::kFloat8E4M3, 128);
  fp8.k_scale = 0.5f;
  fp8.v_scale = 2.0f;
  fp8.block_size = 2048;
  expect_passes(fp8);
  PlanOptions forced;
  forced.num_splits = 5;
  expect_passes(base(KVLayout::kNHD, DType::kBFloat16, DType::kBFloat16, 128), forced);
  forced.num_splits = 0;
  forced.tile_tokens = 32;  // the tiled kernel
  expect_passes(base(KVLayout::kSplit, DType::kBFloat16, DType::kBFloat16, 64), forced);
}

TEST(CudaBenchRunner, SkewedBatchesPassTheSampledCheck) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device present";
  // W6's shape at 32/8 heads, and a 1 x 131072 sequence among short ones, on what the
  // dispatcher chooses; the sampled check recomputes the long sequence.
  Workload w = base(KVLayout::kNHD, DType::kBFloat16, DType::kBFloat16, 128);
  w.num_heads = 32;
  w.num_kv_heads = 8;
  w.seq_lens.assign(64, 512);
  w.seq_lens[0] = 32768;
  RunOptions sampled;
  sampled.check = CheckMode::kSampled;
  for (DType kv : {DType::kBFloat16, DType::kFloat8E4M3}) {
    w.kv_dtype = kv;
    auto r = run_workload(w, 0, kQuick, 1000.0, 3, {}, sampled);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_TRUE(r->check.pass) << to_string(kv) << ": " << r->check.detail;
    EXPECT_EQ(r->check.seqs_checked, 2);  // the first (and longest) and the last
  }
  w.kv_dtype = DType::kBFloat16;
  w.seq_lens.assign(32, 512);
  w.seq_lens[31] = 131072;
  auto r = run_workload(w, 0, kQuick, 1000.0, 3, {}, sampled);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->check.pass) << r->check.detail;
}

}  // namespace
}  // namespace pagedattn::bench
