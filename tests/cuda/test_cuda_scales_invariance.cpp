// Issue 21 on the GPU: fp8 scales as device tensors (per tensor and per KV head) in the
// writer and the readers, a CUDA graph of write_kv + attention replayed after the scale
// values changed, head sizes past 256, and batch-invariant plans on the tiled and prefill
// kernels (a sequence's output and LSE bit for bit alone and inside batches).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "pagedattn/pagedattn.h"
#include "src/core/numeric.h"
#include "src/testing/harness.h"
#include "src/testing/invariance.h"
#include "tests/cuda/cuda_test_util.h"

namespace pagedattn {
namespace {

using cudatest::DeviceMem;
using cudatest::Rng;

testing::CaseConfig fp8_case(testing::ScaleMode mode, KVLayout layout, DType kv, int head) {
  testing::CaseConfig c;
  c.device = Device::cuda(0);
  c.layout = layout;
  c.head_size = head;
  c.num_heads = 16;
  c.num_kv_heads = 4;
  c.dtype = DType::kBFloat16;
  c.kv_dtype = kv;
  c.seq_lens = {2500, 300, 64, 1};
  c.query_lens = {1, 20, 1, 1};
  c.k_scale = 0.0f;  // from the data, then varied per head
  c.v_scale = 0.0f;
  c.scales = mode;
  return c;
}

TEST(CudaDeviceScales, PerHeadAndPerTensorScalesMatchTheOracleOnTheTiledKernel) {
  PA_SKIP_WITHOUT_GPU();
  for (testing::ScaleMode mode : {testing::ScaleMode::kTensor, testing::ScaleMode::kPerHead})
    for (KVLayout l : {KVLayout::kNHD, KVLayout::kSplit, KVLayout::kHND})
      for (int tile : {0, 24}) {  // chosen, and forced (which keeps the tiled kernel)
          const DType kv = l == KVLayout::kSplit ? DType::kFloat8E5M2 : DType::kFloat8E4M3;
          testing::CaseConfig c = fp8_case(mode, l, kv, l == KVLayout::kHND ? 96 : 128);
          c.plan.tile_tokens = tile;
          c.name = testing::case_name(c);
          const testing::CaseResult r = testing::run_case(c);
          ASSERT_TRUE(r.status.ok()) << c.name << ": " << r.status.to_string();
          EXPECT_TRUE(r.writer_exact) << c.name << ": " << r.detail;
          EXPECT_TRUE(r.pass) << c.name << " (" << to_string(r.choice.kernel) << "): " << r.detail;
          if (tile > 0) {
            EXPECT_EQ(r.choice.kernel, KernelId::kCudaTiled) << c.name;
          }
        }
}

TEST(CudaHeadSize, HeadsPast256MatchTheOracle) {
  PA_SKIP_WITHOUT_GPU();
  for (int head : {264, 384, 512})
    for (DType kv : {DType::kBFloat16, DType::kFloat8E4M3})
      for (KVLayout l : {KVLayout::kNHD, KVLayout::kSplit}) {
        if (l == KVLayout::kSplit && kv == DType::kFloat8E4M3 && head % 16 != 0) continue;
        testing::CaseConfig c;
        c.device = Device::cuda(0);
        c.layout = l;
        c.head_size = head;
        c.num_heads = 16;
        c.num_kv_heads = 2;
        c.dtype = DType::kBFloat16;
        c.kv_dtype = kv;
        c.seq_lens = {3000, 200, 33, 1};
        c.query_lens = {1, 70, 1, 1};
        c.k_scale = kv == DType::kBFloat16 ? 1.0f : 0.0f;
        c.v_scale = c.k_scale;
        c.name = testing::case_name(c);
        const testing::CaseResult r = testing::run_case(c);
        ASSERT_TRUE(r.status.ok()) << c.name << ": " << r.status.to_string();
        EXPECT_TRUE(r.pass) << c.name << " (" << to_string(r.choice.kernel) << ", tile "
                            << r.choice.tile_tokens << ", splits " << r.choice.num_splits
                            << "): " << r.detail;
      }
}

// A graph of write_kv + attention captured once and replayed after the scale tensors were
// given new values: the replay must write the cache with the new scales and read it with them
// (the oracle on the downloaded cache and the new host values), and differ from the first.
TEST(CudaDeviceScales, GraphReplayUsesTheCurrentScaleValues) {
  PA_SKIP_WITHOUT_GPU();
  for (bool per_head : {false, true})
    for (int tile : {0, 32}) {
      SCOPED_TRACE(::testing::Message() << (per_head ? "per-head" : "per-tensor") << ", tile " << tile);
      const int H = 8, KVH = 2, D = 128, BS = 16, L0 = 700, L1 = 90, NB = (L0 + L1) / BS + 4;
      const int N = L0 + L1;  // every key written by the captured write_kv
      const DType kv = DType::kFloat8E4M3, qd = DType::kBFloat16;
      Rng rng(5);
      std::vector<std::uint16_t> kvin(static_cast<std::size_t>(N) * 2 * KVH * D), q(2 * H * D);
      for (auto& v : kvin) v = numeric::float_to_bf16_bits(rng.uniform(-1.f, 1.f));
      for (auto& v : q) v = numeric::float_to_bf16_bits(rng.uniform(-1.f, 1.f));
      std::vector<std::int64_t> slots(N);
      std::vector<std::int32_t> bt(2 * NB, 0), sl{L0, L1}, qsl{0, 1, 2};
      const int b0 = (L0 + BS - 1) / BS;
      for (int j = 0; j < NB; ++j) bt[static_cast<std::size_t>(j)] = j;                 // seq 0
      for (int j = 0; j < NB - b0; ++j) bt[static_cast<std::size_t>(NB + j)] = b0 + j;  // seq 1
      for (int t = 0; t < L0; ++t) slots[static_cast<std::size_t>(t)] = t;
      for (int t = 0; t < L1; ++t) slots[static_cast<std::size_t>(L0 + t)] = b0 * BS + t;
      const int ns = per_head ? KVH : 1;
      std::vector<float> ks1(ns), vs1(ns), ks2(ns), vs2(ns);
      for (int g = 0; g < ns; ++g) {
        ks1[g] = 0.02f * (1 + g);
        vs1[g] = 0.015f * (1 + 2 * g);
        ks2[g] = 0.035f / (1 + g);
        vs2[g] = 0.011f * (3 - g);
      }
      KVCacheSpec spec{KVLayout::kNHD, NB, BS, KVH, D, kv, 0};
      const std::size_t cache_bytes = static_cast<std::size_t>(*kv_cache_elements(spec));
      DeviceMem kc, vc, kvm, qm, om, lm, btm, slm, qslm, slotm, ksm, vsm, ws;
      PA_ASSERT_OK(kc.alloc(cache_bytes));
      PA_ASSERT_OK(vc.alloc(cache_bytes));
      PA_ASSERT_OK(kvm.alloc(kvin.size() * 2));
      PA_ASSERT_OK(kvm.upload(kvin));
      PA_ASSERT_OK(qm.alloc(q.size() * 2));
      PA_ASSERT_OK(qm.upload(q));
      PA_ASSERT_OK(om.alloc(q.size() * 2));
      PA_ASSERT_OK(lm.alloc(2 * H * 4));
      PA_ASSERT_OK(btm.alloc(bt.size() * 4));
      PA_ASSERT_OK(btm.upload(bt));
      PA_ASSERT_OK(slm.alloc(8));
      PA_ASSERT_OK(slm.upload(sl));
      PA_ASSERT_OK(qslm.alloc(12));
      PA_ASSERT_OK(qslm.upload(qsl));
      PA_ASSERT_OK(slotm.alloc(slots.size() * 8));
      PA_ASSERT_OK(slotm.upload(slots));
      PA_ASSERT_OK(ksm.alloc(ns * 4));
      PA_ASSERT_OK(vsm.alloc(ns * 4));
      PA_ASSERT_OK(ksm.upload(ks1));
      PA_ASSERT_OK(vsm.upload(vs1));
      PA_ASSERT_OK(cuda::testsupport::memset_device(kc.get(), 0xFF, cache_bytes));
      PA_ASSERT_OK(cuda::testsupport::memset_device(vc.get(), 0xFF, cache_bytes));
      const Device dev = Device::cuda(0);
      auto cache = make_kv_cache(spec, kc.get(), vc.get(), dev, 7.0f, 9.0f);  // scalars ignored
      ASSERT_TRUE(cache.ok()) << cache.status().to_string();
      cache->k_scales = TensorView::contiguous(ksm.get(), DType::kFloat32, {ns}, dev);
      cache->v_scales = TensorView::contiguous(vsm.get(), DType::kFloat32, {ns}, dev);
      const TensorView key = TensorView::strided(kvm.get(), qd, {N, KVH, D}, {2 * KVH * D, D, 1}, dev);
      const TensorView value =
          TensorView::strided(kvm.at(KVH * D * 2), qd, {N, KVH, D}, {2 * KVH * D, D, 1}, dev);
      const TensorView sm = TensorView::contiguous(slotm.get(), DType::kInt64, {N}, dev);
      AttentionArgs a;
      a.query = TensorView::contiguous(qm.get(), qd, {2, H, D}, dev);
      a.out = TensorView::contiguous(om.get(), qd, {2, H, D}, dev);
      a.lse = TensorView::contiguous(lm.get(), DType::kFloat32, {2, H}, dev);
      a.cache = *cache;
      a.block_table = TensorView::contiguous(btm.get(), DType::kInt32, {2, NB}, dev);
      a.seq_lens = TensorView::contiguous(slm.get(), DType::kInt32, {2}, dev);
      a.query_start_loc = TensorView::contiguous(qslm.get(), DType::kInt32, {3}, dev);
      a.params.scale = 6.0f * default_scale(D);
      HostMetadata host;
      host.block_table = TensorView::contiguous(bt.data(), DType::kInt32, {2, NB});
      host.seq_lens = TensorView::contiguous(sl.data(), DType::kInt32, {2});
      host.query_start_loc = TensorView::contiguous(qsl.data(), DType::kInt32, {3});
      PlanOptions opts;
      opts.tile_tokens = tile;
      auto plan = plan_attention(a, host, opts);
      ASSERT_TRUE(plan.ok()) << plan.status().to_string();
      PA_ASSERT_OK(ws.alloc(std::max<std::size_t>(plan->workspace_bytes(), 16)));

      auto stream = cuda::testsupport::stream_create();
      ASSERT_TRUE(stream.ok());
      PA_ASSERT_OK(cuda::testsupport::capture_begin(*stream));
      const Status wst = write_kv(key, value, sm, *cache, *stream);
      const Status ast = run_attention(*plan, a, ws.get(), ws.size(), *stream);
      auto exec = cuda::testsupport::capture_end(*stream);
      PA_ASSERT_OK(wst);
      PA_ASSERT_OK(ast);
      ASSERT_TRUE(exec.ok()) << exec.status().to_string();

      std::vector<std::uint8_t> first_out;
      for (int round = 0; round < 2; ++round) {
        const std::vector<float>& kh = round == 0 ? ks1 : ks2;
        const std::vector<float>& vh = round == 0 ? vs1 : vs2;
        PA_ASSERT_OK(ksm.upload(kh));
        PA_ASSERT_OK(vsm.upload(vh));
        PA_ASSERT_OK(cuda::testsupport::graph_launch(*exec, *stream));
        PA_ASSERT_OK(cuda::testsupport::stream_synchronize(*stream));
        // The oracle: the writer oracle into a host cache with these values, then attention.
        std::vector<std::uint8_t> hk(cache_bytes, 0xFF), hv(cache_bytes, 0xFF);
        auto hc = make_kv_cache(spec, hk.data(), hv.data());
        ASSERT_TRUE(hc.ok());
        hc->k_scales = TensorView::contiguous(const_cast<float*>(kh.data()), DType::kFloat32, {ns});
        hc->v_scales = TensorView::contiguous(const_cast<float*>(vh.data()), DType::kFloat32, {ns});
        const TensorView hkey = TensorView::strided(kvin.data(), qd, {N, KVH, D}, {2 * KVH * D, D, 1});
        const TensorView hval =
            TensorView::strided(kvin.data() + KVH * D, qd, {N, KVH, D}, {2 * KVH * D, D, 1});
        PA_ASSERT_OK(reference_write_kv(hkey, hval, TensorView::contiguous(slots.data(), DType::kInt64, {N}), *hc));
        EXPECT_TRUE(kc.bytes() == hk) << "round " << round << ": key cache differs from the writer oracle";
        EXPECT_TRUE(vc.bytes() == hv) << "round " << round << ": value cache differs from the writer oracle";
        std::vector<float> ro(2 * H * D), rl(2 * H);
        AttentionArgs ra = a;
        ra.query = TensorView::contiguous(q.data(), qd, {2, H, D});
        ra.out = TensorView::contiguous(ro.data(), DType::kFloat32, {2, H, D});
        ra.lse = TensorView::contiguous(rl.data(), DType::kFloat32, {2, H});
        ra.cache = *hc;
        ra.block_table = host.block_table;
        ra.seq_lens = host.seq_lens;
        ra.query_start_loc = host.query_start_loc;
        PA_ASSERT_OK(reference_attention(ra));
        const std::vector<std::uint8_t> ob = om.bytes();
        const testing::Tolerance tol = testing::tolerance_for(qd, kv, L0);
        int bad = 0;
        for (std::size_t i = 0; i < ro.size(); ++i) {
          std::uint16_t bits;
          std::memcpy(&bits, ob.data() + 2 * i, 2);
          const double got = numeric::bf16_bits_to_float(bits);
          if (!(std::fabs(got - ro[i]) <= tol.atol + tol.rtol * std::fabs(ro[i])) && bad++ < 3)
            ADD_FAILURE() << "round " << round << " out[" << i << "] = " << got << ", oracle " << ro[i];
        }
        EXPECT_EQ(bad, 0) << "round " << round << ": elements outside the budget";
        if (round == 0) {
          first_out = ob;
        } else {
          EXPECT_FALSE(ob == first_out) << "the replay with new scales gave the old output";
        }
      }
      cuda::testsupport::graph_destroy(*exec);
      cuda::testsupport::stream_destroy(*stream);
    }
}

// ---------------------------------------------------------------- batch invariance
testing::InvarianceResult check(testing::InvarianceConfig c, bool invariant = true) {
  c.device = Device::cuda(0);
  c.plan.batch_invariant = invariant;
  return testing::check_batch_invariance(c);
}

TEST(CudaBatchInvariance, TiledKernelDecodeAloneAndInBatchesIsBitIdentical) {
  PA_SKIP_WITHOUT_GPU();
  // Head 72: a head size only the tiled kernel takes. Subjects below, at and above the
  // 2048-token split, and past 16 splits (chunks doubled), next to shorter and longer ones.
  for (int subject : {900, 3000, 40000})
    for (int at : {0, 2}) {
      testing::InvarianceConfig c;
      c.head_size = 72;
      c.subject = {subject, 1};
      c.others = {{100, 1}, {70000, 1}, {7, 1}, {2049, 1}};
      c.subject_index = at;
      const testing::InvarianceResult r = check(c);
      ASSERT_TRUE(r.status.ok()) << r.status.to_string();
      EXPECT_EQ(r.alone.kernel, KernelId::kCudaTiled);
      EXPECT_EQ(r.batched.kernel, KernelId::kCudaTiled);
      EXPECT_TRUE(r.out_equal) << "subject " << subject << " at " << at << " (splits "
                               << r.alone.num_splits << " alone, " << r.batched.num_splits
                               << " in the batch): " << r.detail;
      EXPECT_TRUE(r.lse_equal) << "subject " << subject << " at " << at << ": " << r.detail;
    }
}

TEST(CudaBatchInvariance, WithoutTheModeTheTiledKernelsBitsDependOnTheBatch) {
  // The control of the test above: the automatic split count follows the batch, so the same
  // comparison differs. Shows that the check can see a difference.
  PA_SKIP_WITHOUT_GPU();
  testing::InvarianceConfig c;
  c.head_size = 72;
  c.subject = {3000, 1};
  c.others = {{100, 1}, {70000, 1}, {7, 1}, {2049, 1}};
  const testing::InvarianceResult r = check(c, /*invariant=*/false);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  ASSERT_NE(r.alone.num_splits, r.batched.num_splits);
  EXPECT_FALSE(r.out_equal && r.lse_equal);
}

TEST(CudaBatchInvariance, TiledKernelFp8WindowAndPrefillAreBitIdentical) {
  PA_SKIP_WITHOUT_GPU();
  struct Sub {
    std::pair<int, int> subject;
    int window;
    DType kv;
  };
  for (const Sub& s : {Sub{{5000, 1}, 0, DType::kFloat8E4M3}, Sub{{5000, 1}, 3000, DType::kFloat16},
                       Sub{{1500, 70}, 700, DType::kFloat16}, Sub{{6000, 40}, 0, DType::kFloat8E5M2}}) {
    testing::InvarianceConfig c;
    c.head_size = 72;
    c.kv_dtype = s.kv;
    c.sliding_window = s.window;
    c.subject = s.subject;
    c.others = {{300, 1}, {4000, 33}, {64, 64}, {50000, 1}};
    c.subject_index = 2;
    const testing::InvarianceResult r = check(c);
    ASSERT_TRUE(r.status.ok()) << r.status.to_string();
    EXPECT_EQ(r.batched.kernel, KernelId::kCudaTiled);
    EXPECT_TRUE(r.out_equal) << s.subject.first << "x" << s.subject.second << ": " << r.detail;
    EXPECT_TRUE(r.lse_equal) << s.subject.first << "x" << s.subject.second << ": " << r.detail;
  }
}

// Decode rows that the decode fast path does not take, in a batch whose prefill chunks run on
// a prefill kernel: in batch-invariant mode they run on the tiled kernel with its fixed split
// cut (as alone), not unsplit on the prefill kernel. The class: a GQA ratio above 16, head
// sizes without a decode instance (72 with fp8), head 256 with a GQA ratio above 8, fp8
// prefill on the Hopper kernel.
TEST(CudaBatchInvariance, DecodeRowsBesideAPrefillKernelAreBitIdentical) {
  PA_SKIP_WITHOUT_GPU();
  struct Sub {
    int heads, kv_heads, head;
    DType q, kv;
    KVLayout layout;
    int block;
  };
  for (const Sub& s : {Sub{32, 1, 128, DType::kBFloat16, DType::kBFloat16, KVLayout::kNHD, 16},
                       Sub{8, 2, 72, DType::kBFloat16, DType::kFloat8E4M3, KVLayout::kNHD, 16},
                       Sub{16, 1, 256, DType::kFloat16, DType::kFloat16, KVLayout::kNHD, 16}})
    for (int subject : {5000, 40000}) {
      testing::InvarianceConfig c;
      c.num_heads = s.heads;
      c.num_kv_heads = s.kv_heads;
      c.head_size = s.head;
      c.dtype = s.q;
      c.kv_dtype = s.kv;
      c.layout = s.layout;
      c.block_size = s.block;
      c.subject = {subject, 1};
      c.others = {{300, 1}, {4000, 33}, {64, 64}, {9000, 1}};
      c.subject_index = 1;
      const testing::InvarianceResult r = check(c);
      const std::string what = "head " + std::to_string(s.head) + " GQA " +
                               std::to_string(s.heads / s.kv_heads) + " " + to_string(s.kv) +
                               " subject " + std::to_string(subject);
      ASSERT_TRUE(r.status.ok()) << what << ": " << r.status.to_string();
      EXPECT_TRUE(r.batched.prefill_rows_mma) << what << ": " << r.batched.reason;
      EXPECT_FALSE(r.batched.decode_rows_fast_path) << what << ": " << r.batched.reason;
      EXPECT_GT(r.alone.num_splits, 1) << what << ": the subject alone should split";
      EXPECT_TRUE(r.out_equal) << what << ": " << r.detail;
      EXPECT_TRUE(r.lse_equal) << what << ": " << r.detail;
    }
}

TEST(CudaBatchInvariance, PrefillKernelAloneAndInBatchesIsBitIdentical) {
  PA_SKIP_WITHOUT_GPU();
  for (int window : {0, 500}) {
    testing::InvarianceConfig c;
    c.head_size = 128;
    c.num_heads = 16;
    c.num_kv_heads = 4;
    c.dtype = DType::kBFloat16;
    c.kv_dtype = DType::kBFloat16;
    c.sliding_window = window;
    c.subject = {1500, 70};
    c.others = {{300, 17}, {4000, 33}, {64, 64}, {9000, 1}, {30, 1}};
    c.subject_index = 1;
    const testing::InvarianceResult r = check(c);
    ASSERT_TRUE(r.status.ok()) << r.status.to_string();
    EXPECT_TRUE(r.alone.prefill_rows_mma) << r.alone.reason;
    EXPECT_TRUE(r.batched.prefill_rows_mma) << r.batched.reason;
    EXPECT_TRUE(r.out_equal) << "window " << window << ": " << r.detail;
    EXPECT_TRUE(r.lse_equal) << "window " << window << ": " << r.detail;
  }
}

// check_each_sequence_alone (what `pagedattn verify --batch-invariant` runs): every sequence
// of a mixed batch, with sinks, ALiBi and softcap, alone and in the batch.
TEST(CudaBatchInvariance, EverySequenceOfAMixedBatchAloneIsBitIdentical) {
  PA_SKIP_WITHOUT_GPU();
  testing::InvarianceConfig c;
  c.device = Device::cuda(0);
  c.plan.batch_invariant = true;
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.head_size = 128;
  c.dtype = DType::kBFloat16;
  c.kv_dtype = DType::kBFloat16;
  for (bool features : {false, true}) {
    c.sinks = c.alibi = features;
    c.softcap = features ? 30.0f : 0.0f;
    const std::vector<std::pair<int, int>> batch{{3000, 1}, {70000, 1}, {1500, 70}, {64, 0},
                                                 {4000, 33}, {7, 1}};
    const testing::EachAloneResult r = testing::check_each_sequence_alone(c, batch);
    ASSERT_TRUE(r.status.ok()) << r.status.to_string();
    EXPECT_EQ(r.checked, 5);  // the query_len-0 sequence has no rows
    EXPECT_TRUE(r.differing.empty()) << (features ? "with features: " : "") << r.detail;
  }
}

TEST(CudaBatchInvariance, EachSequenceAloneSeesTheDifferenceWithoutTheMode) {
  // The control: without the mode the 3000-token sequence (index 1) splits differently alone.
  PA_SKIP_WITHOUT_GPU();
  testing::InvarianceConfig c;
  c.device = Device::cuda(0);
  c.head_size = 72;
  const testing::EachAloneResult r = testing::check_each_sequence_alone(
      c, {{100, 1}, {3000, 1}, {70000, 1}, {7, 1}, {2049, 1}});
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_EQ(r.checked, 5);
  EXPECT_NE(std::find(r.differing.begin(), r.differing.end(), 1), r.differing.end())
      << "differing: " << r.differing.size() << "; " << r.detail;
}

// ---------------------------------------------------------------- skewed batches
// One long sequence among short ones, first and last: the tiled kernel splits
// the long one into balanced pieces wherever it sits (fixed-token splits of a balanced CTA's
// share) and stays exact against the oracle.
TEST(CudaSkewedBatch, LongSequenceAnywhereInTheBatchIsSplitAndExact) {
  PA_SKIP_WITHOUT_GPU();
  for (int at : {0, 63})
    for (DType kv : {DType::kFloat16, DType::kFloat8E4M3}) {
      testing::CaseConfig c;
      c.device = Device::cuda(0);
      c.layout = KVLayout::kNHD;
      c.head_size = 72;  // the tiled kernel's
      c.num_heads = 32;
      c.num_kv_heads = 8;
      c.dtype = DType::kFloat16;
      c.kv_dtype = kv;
      c.k_scale = kv == DType::kFloat16 ? 1.0f : 0.0f;
      c.v_scale = c.k_scale;
      c.seq_lens.assign(64, 512);
      c.seq_lens[static_cast<std::size_t>(at)] = 16384;
      c.seq_lens[5] = 513;  // a split edge in a short one too
      c.query_lens.assign(64, 1);
      c.extra_blocks = 1;
      c.tag = "skew" + std::to_string(at);
      c.name = testing::case_name(c);
      const testing::CaseResult r = testing::run_case(c);
      ASSERT_TRUE(r.status.ok()) << c.name << ": " << r.status.to_string();
      EXPECT_EQ(r.choice.kernel, KernelId::kCudaTiled) << c.name;
      EXPECT_GT(r.choice.num_splits, 4) << c.name << ": the long sequence must be split: "
                                        << r.choice.reason;
      EXPECT_TRUE(r.pass) << c.name << ": " << r.detail;
    }
}

}  // namespace
}  // namespace pagedattn
