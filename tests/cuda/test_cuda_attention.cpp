// GPU attention tests beyond the shared matrix:
//  - heavy cases (no sanitizer): sequences of 131072 tokens, 1024+ decode rows, and a cache of
//    more than 2^31 elements whose used blocks are the highest ids (int64 offsets);
//  - SanitizeEdges (run under compute-sanitizer): head_size 64 with the query ending exactly at
//    the end of its allocation; merge_attention_states, aliased;
//  - CUDA-graph capture + replay equals eager bit for bit; two runs are bitwise equal.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "src/testing/harness.h"
#include "tests/cuda/cuda_test_util.h"

namespace pagedattn::cudatest {
namespace {

using testing::CaseConfig;

void expect_case_passes(const CaseConfig& config) {
  const testing::CaseResult result = testing::run_case(config);
  ASSERT_TRUE(result.status.ok()) << result.status.to_string();
  EXPECT_GT(result.elements_checked, 0);
  EXPECT_TRUE(result.writer_exact) << result.detail;
  EXPECT_TRUE(result.pass) << result.detail << "\n  " << result.choice.reason;
}

// ------------------------------------------------------------------ heavy (no sanitizer)

TEST(CudaHeavy, LongSequence131072DecodeAndPrefillChunk) {
  PA_SKIP_WITHOUT_GPU();
  CaseConfig c;
  c.device = Device::cuda();
  c.layout = KVLayout::kNHD;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_size = 128;
  c.block_size = 16;
  c.dtype = c.kv_dtype = DType::kBFloat16;
  c.seq_lens = {131072, 131073};
  c.query_lens = {1, 16};
  c.name = "heavy_len131072";
  expect_case_passes(c);
}

TEST(CudaHeavy, LongSequence131072SplitLayoutWindow) {
  PA_SKIP_WITHOUT_GPU();
  CaseConfig c;
  c.device = Device::cuda();
  c.layout = KVLayout::kSplit;
  c.num_heads = 16;
  c.num_kv_heads = 4;
  c.head_size = 64;
  c.block_size = 32;
  c.dtype = DType::kFloat16;
  c.kv_dtype = DType::kFloat8E4M3;
  c.k_scale = 0.5f;
  c.v_scale = 0.25f;
  c.seq_lens = {131072};
  c.query_lens = {3};
  c.sliding_window = 70000;
  c.sinks = true;
  c.name = "heavy_len131072_split_fp8_window";
  expect_case_passes(c);
}

TEST(CudaHeavy, Decode1024Rows) {
  PA_SKIP_WITHOUT_GPU();
  CaseConfig c;
  c.device = Device::cuda();
  c.layout = KVLayout::kSplit;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_size = 64;
  c.block_size = 16;
  c.dtype = c.kv_dtype = DType::kFloat16;
  for (int i = 0; i < 1024; ++i) {
    c.seq_lens.push_back(1 + (i * 7919) % 700);
    c.query_lens.push_back(1);
  }
  c.name = "heavy_decode1024";
  expect_case_passes(c);
}

TEST(CudaHeavy, Mixed1100RowsPrefillDecodeEmpty) {
  PA_SKIP_WITHOUT_GPU();
  CaseConfig c;
  c.device = Device::cuda();
  c.layout = KVLayout::kHND;
  c.num_heads = 10;
  c.num_kv_heads = 2;  // GQA 5
  c.head_size = 80;
  c.block_size = 544;
  c.dtype = c.kv_dtype = DType::kBFloat16;
  c.sliding_window = 512;
  c.alibi = true;
  for (int i = 0; i < 1100; ++i) {
    const int len = 1 + (i * 104729) % 600;
    int q = 1;
    if (i % 97 == 0) q = std::min(len, 1 + i % 200);
    if (i % 131 == 5) q = 0;  // skipped sequence
    c.seq_lens.push_back(len);
    c.query_lens.push_back(q);
  }
  c.name = "heavy_mixed1100";
  expect_case_passes(c);
}

// A cache of more than 2^31 elements whose used blocks are the highest ids: every
// block id x block stride product exceeds int32. The GPU writes through write_kv with int64
// slots and reads through the block table; the host oracle uses a compact copy of the same
// blocks (ids remapped to 0..n-1).
TEST(CudaHeavy, CacheBeyond2Pow31ElementsTopBlockIds) {
  PA_SKIP_WITHOUT_GPU();
  for (KVLayout layout : {KVLayout::kNHD, KVLayout::kSplit}) {
    SCOPED_TRACE(to_string(layout));
    const DType dt = DType::kBFloat16;
    const int H = 4, KVH = 1, D = 128, BS = 16;
    const std::int64_t block_elems = std::int64_t{BS} * KVH * D;
    // Room above 2^31 elements for every used block (84 here) with ids counted from the top.
    const std::int64_t num_blocks = (std::int64_t{1} << 31) / block_elems + 256;
    KVCacheSpec big;
    big.layout = layout;
    big.num_blocks = num_blocks;
    big.block_size = BS;
    big.num_kv_heads = KVH;
    big.head_size = D;
    big.dtype = dt;
    const std::int64_t big_elems = kv_cache_elements(big).value();
    ASSERT_GT(big_elems, std::int64_t{1} << 31);
    const std::size_t big_bytes = static_cast<std::size_t>(big_elems) * 2;
    DeviceMem km, vm;
    PA_ASSERT_OK(km.alloc(big_bytes));
    PA_ASSERT_OK(vm.alloc(big_bytes));
    PA_ASSERT_OK(cuda::testsupport::memset_device(km.get(), 0xFF, big_bytes));  // NaN
    PA_ASSERT_OK(cuda::testsupport::memset_device(vm.get(), 0xFF, big_bytes));

    const std::vector<int> seq_lens = {300, 1000, 17};
    const std::vector<int> query_lens = {1, 7, 1};
    const int num_seqs = 3;
    std::vector<std::int64_t> nblk;
    std::int64_t needed = 0, maxb = 0;
    for (int s : seq_lens) {
      nblk.push_back((s + BS - 1) / BS);
      needed += nblk.back();
      maxb = std::max(maxb, nblk.back());
    }
    Rng rng(99);
    std::vector<std::int64_t> perm(static_cast<std::size_t>(needed));
    std::iota(perm.begin(), perm.end(), 0);
    for (std::int64_t i = needed - 1; i > 0; --i) std::swap(perm[i], perm[rng.below(i + 1)]);
    auto big_id = [&](std::int64_t compact) { return num_blocks - 1 - perm[compact]; };
    const std::int64_t width = maxb;
    std::vector<std::int32_t> bt_small(num_seqs * width, 0), bt_big(num_seqs * width, 0);
    std::int64_t next = 0;
    for (int s = 0; s < num_seqs; ++s)
      for (std::int64_t j = 0; j < nblk[s]; ++j, ++next) {
        bt_small[s * width + j] = static_cast<std::int32_t>(next);
        bt_big[s * width + j] = static_cast<std::int32_t>(big_id(next));
      }

    // K/V rows of every position, slots in both numberings
    std::int64_t rows = 0;
    for (int s : seq_lens) rows += s;
    std::vector<std::uint8_t> kb(static_cast<std::size_t>(rows * KVH * D) * 2), vb(kb.size());
    std::vector<std::int64_t> slots_small, slots_big;
    {
      std::int64_t r = 0;
      for (int s = 0; s < num_seqs; ++s)
        for (int t = 0; t < seq_lens[s]; ++t, ++r) {
          slots_small.push_back(std::int64_t{bt_small[s * width + t / BS]} * BS + t % BS);
          slots_big.push_back(std::int64_t{bt_big[s * width + t / BS]} * BS + t % BS);
          for (std::int64_t e = 0; e < KVH * D; ++e) {
            numeric::store_from_float(kb.data(), dt, r * KVH * D + e, rng.uniform(-1, 1));
            numeric::store_from_float(vb.data(), dt, r * KVH * D + e, rng.uniform(-1, 1));
          }
        }
    }
    // every used block starts past element 2^31
    for (std::int64_t c = 0; c < needed; ++c) ASSERT_GT(big_id(c) * block_elems, std::int64_t{1} << 31);
    const Device dev = Device::cuda(0);
    DeviceMem dk, dv, ds;
    PA_ASSERT_OK(dk.alloc(kb.size()));
    PA_ASSERT_OK(dk.upload(kb));
    PA_ASSERT_OK(dv.alloc(vb.size()));
    PA_ASSERT_OK(dv.upload(vb));
    PA_ASSERT_OK(ds.alloc(slots_big.size() * 8));
    PA_ASSERT_OK(ds.upload(slots_big));
    auto dcache = make_kv_cache(big, km.get(), vm.get(), dev);
    ASSERT_TRUE(dcache.ok()) << dcache.status().to_string();
    WriteKVOptions wo;
    wo.host_slot_mapping = TensorView::contiguous(slots_big.data(), DType::kInt64, {rows});
    PA_ASSERT_OK(write_kv(TensorView::contiguous(dk.get(), dt, {rows, KVH, D}, dev),
                          TensorView::contiguous(dv.get(), dt, {rows, KVH, D}, dev),
                          TensorView::contiguous(ds.get(), DType::kInt64, {rows}, dev), *dcache,
                          nullptr, wo));
    PA_ASSERT_OK(cuda::device_synchronize());

    // compact host cache through the writer oracle
    KVCacheSpec small = big;
    small.num_blocks = needed;
    const std::size_t small_bytes = static_cast<std::size_t>(kv_cache_elements(small).value()) * 2;
    std::vector<std::uint8_t> hk(small_bytes, 0xFF), hv(small_bytes, 0xFF);
    auto hcache = make_kv_cache(small, hk.data(), hv.data(), Device::cpu());
    ASSERT_TRUE(hcache.ok());
    PA_ASSERT_OK(reference_write_kv(TensorView::contiguous(kb.data(), dt, {rows, KVH, D}),
                                    TensorView::contiguous(vb.data(), dt, {rows, KVH, D}),
                                    TensorView::contiguous(slots_small.data(), DType::kInt64, {rows}),
                                    *hcache));
    // the used top blocks equal the compact blocks bit for bit
    const std::size_t bbytes = static_cast<std::size_t>(block_elems) * 2;
    std::vector<std::uint8_t> got(bbytes);
    for (std::int64_t c = 0; c < needed; ++c) {
      const std::size_t off = static_cast<std::size_t>(big_id(c)) * bbytes;
      PA_ASSERT_OK(km.download(got.data(), bbytes, off));
      ASSERT_EQ(0, std::memcmp(got.data(), hk.data() + c * bbytes, bbytes)) << "key block " << big_id(c);
      PA_ASSERT_OK(vm.download(got.data(), bbytes, off));
      ASSERT_EQ(0, std::memcmp(got.data(), hv.data() + c * bbytes, bbytes)) << "value block " << big_id(c);
    }

    // attention on the big cache vs the oracle on the compact one
    std::vector<std::int32_t> starts(num_seqs + 1, 0);
    for (int s = 0; s < num_seqs; ++s) starts[s + 1] = starts[s] + query_lens[s];
    const std::int64_t T = starts.back();
    std::vector<std::uint8_t> q(static_cast<std::size_t>(T * H * D) * 2);
    for (std::int64_t i = 0; i < T * H * D; ++i) numeric::store_from_float(q.data(), dt, i, rng.uniform(-1, 1));
    std::vector<std::int32_t> sl(seq_lens.begin(), seq_lens.end());
    DeviceMem dq, dout, dlse, dbt, dsl, dqsl;
    PA_ASSERT_OK(dq.alloc(q.size()));
    PA_ASSERT_OK(dq.upload(q));
    PA_ASSERT_OK(dout.alloc(q.size()));
    PA_ASSERT_OK(dlse.alloc(static_cast<std::size_t>(T * H) * 4));
    PA_ASSERT_OK(dbt.alloc(bt_big.size() * 4));
    PA_ASSERT_OK(dbt.upload(bt_big));
    PA_ASSERT_OK(dsl.alloc(sl.size() * 4));
    PA_ASSERT_OK(dsl.upload(sl));
    PA_ASSERT_OK(dqsl.alloc(starts.size() * 4));
    PA_ASSERT_OK(dqsl.upload(starts));
    AttentionArgs a;
    a.query = TensorView::contiguous(dq.get(), dt, {T, H, D}, dev);
    a.out = TensorView::contiguous(dout.get(), dt, {T, H, D}, dev);
    a.lse = TensorView::contiguous(dlse.get(), DType::kFloat32, {T, H}, dev);
    a.cache = *dcache;
    a.block_table = TensorView::contiguous(dbt.get(), DType::kInt32, {num_seqs, width}, dev);
    a.seq_lens = TensorView::contiguous(dsl.get(), DType::kInt32, {num_seqs}, dev);
    a.query_start_loc = TensorView::contiguous(dqsl.get(), DType::kInt32, {num_seqs + 1}, dev);
    a.params.scale = default_scale(D) * 6.0f;
    HostMetadata host;
    host.block_table = TensorView::contiguous(bt_big.data(), DType::kInt32, {num_seqs, width});
    host.seq_lens = TensorView::contiguous(sl.data(), DType::kInt32, {num_seqs});
    host.query_start_loc = TensorView::contiguous(starts.data(), DType::kInt32, {num_seqs + 1});
    PA_ASSERT_OK(paged_attention(a, host));
    std::vector<std::uint8_t> out(q.size());
    std::vector<float> lse(static_cast<std::size_t>(T * H));
    PA_ASSERT_OK(dout.download(out.data(), out.size()));
    PA_ASSERT_OK(dlse.download(lse.data(), lse.size() * 4));

    std::vector<float> ref(static_cast<std::size_t>(T * H * D)), ref_lse(static_cast<std::size_t>(T * H));
    AttentionArgs ra;
    ra.query = TensorView::contiguous(q.data(), dt, {T, H, D});
    ra.out = TensorView::contiguous(ref.data(), DType::kFloat32, {T, H, D});
    ra.lse = TensorView::contiguous(ref_lse.data(), DType::kFloat32, {T, H});
    ra.cache = *hcache;
    ra.block_table = TensorView::contiguous(bt_small.data(), DType::kInt32, {num_seqs, width});
    ra.seq_lens = host.seq_lens;
    ra.query_start_loc = host.query_start_loc;
    ra.params = a.params;
    PA_ASSERT_OK(reference_attention(ra));
    const auto tol = testing::tolerance_for(dt, dt);
    std::int64_t bad = 0;
    for (std::int64_t i = 0; i < T * H * D; ++i) {
      const double g = numeric::load_as_float(out.data(), dt, i), r = ref[i];
      if (!(std::fabs(g - r) <= tol.atol + tol.rtol * std::fabs(r))) ++bad;
    }
    for (std::int64_t i = 0; i < T * H; ++i)
      if (!(std::fabs(lse[i] - ref_lse[i]) <= tol.atol + tol.rtol * std::fabs(ref_lse[i]))) ++bad;
    EXPECT_EQ(bad, 0);
  }
}

// ------------------------------------------------------------------ sanitizer edges

// vLLM's head-64 fault: surplus lanes read past the head and, for the last row, past the end
// of the query tensor. Here the query's last byte is the last byte of its allocation (a
// multiple of 2 MiB), so any read past it leaves the allocation (compute-sanitizer reports it;
// without the sanitizer it may fault).
TEST(SanitizeEdges, Head64QueryEndsAtAllocationEnd) {
  PA_SKIP_WITHOUT_GPU();
  for (int variant = 0; variant < 3; ++variant) {
    ProblemSpec s;
    s.layout = variant == 0 ? KVLayout::kSplit : variant == 1 ? KVLayout::kNHD : KVLayout::kHND;
    s.dtype = s.kv_dtype = variant == 1 ? DType::kBFloat16 : DType::kFloat16;
    s.num_heads = 32;
    s.num_kv_heads = 8;
    s.head_size = 64;
    s.seq_lens.clear();
    s.query_lens.clear();
    for (int i = 0; i < 33; ++i) {
      s.seq_lens.push_back(1 + (i * 37) % 97);
      s.query_lens.push_back(1);
    }
    if (variant == 2) {  // a prefill chunk last: its last row ends the query tensor
      s.seq_lens.push_back(70);
      s.query_lens.push_back(9);
    }
    s.seed = 40 + variant;
    auto p = Problem::make(s, /*query_at_end=*/true);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    PA_ASSERT_OK((*p)->plan());
    PA_ASSERT_OK((*p)->run());
    PA_ASSERT_OK(cuda::device_synchronize());
    EXPECT_EQ((*p)->check_against_oracle(), "") << "variant " << variant;
  }
}

TEST(SanitizeEdges, MergeStatesMatchesCpuAndMayAlias) {
  PA_SKIP_WITHOUT_GPU();
  for (DType dt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    SCOPED_TRACE(to_string(dt));
    const std::int64_t T = 7, H = 3, D = 40;
    Rng rng(17);
    const std::size_t es = dtype_size(dt);
    std::vector<std::uint8_t> a(static_cast<std::size_t>(T * H * D) * es), b(a.size());
    for (std::int64_t i = 0; i < T * H * D; ++i) {
      numeric::store_from_float(a.data(), dt, i, rng.uniform(-1, 1));
      numeric::store_from_float(b.data(), dt, i, rng.uniform(-1, 1));
    }
    std::vector<float> la(static_cast<std::size_t>(T * H)), lb(la.size());
    for (auto& v : la) v = rng.uniform(-2, 3);
    for (auto& v : lb) v = rng.uniform(-2, 3);
    const float ninf = -std::numeric_limits<float>::infinity();
    la[0] = ninf;          // only b
    lb[4] = ninf;          // only a
    la[8] = lb[8] = ninf;  // neither: out 0, lse -inf
    // Non-finite LSEs against an empty state: NaN results on both backends (the API's rule).
    la[10] = NAN;
    lb[10] = ninf;
    la[12] = std::numeric_limits<float>::infinity();
    lb[12] = ninf;
    la[14] = ninf;
    lb[14] = NAN;
    // CPU
    std::vector<std::uint8_t> cpu_out(a.size());
    std::vector<float> cpu_lse(la.size());
    PA_ASSERT_OK(merge_attention_states(
        TensorView::contiguous(a.data(), dt, {T, H, D}), TensorView::contiguous(la.data(), DType::kFloat32, {T, H}),
        TensorView::contiguous(b.data(), dt, {T, H, D}), TensorView::contiguous(lb.data(), DType::kFloat32, {T, H}),
        TensorView::contiguous(cpu_out.data(), dt, {T, H, D}),
        TensorView::contiguous(cpu_lse.data(), DType::kFloat32, {T, H})));
    // GPU, out aliasing out_a
    const Device dev = Device::cuda(0);
    DeviceMem da, db, dla, dlb, dlo;
    PA_ASSERT_OK(da.alloc(a.size()));
    PA_ASSERT_OK(da.upload(a));
    PA_ASSERT_OK(db.alloc(b.size()));
    PA_ASSERT_OK(db.upload(b));
    PA_ASSERT_OK(dla.alloc(la.size() * 4));
    PA_ASSERT_OK(dla.upload(la));
    PA_ASSERT_OK(dlb.alloc(lb.size() * 4));
    PA_ASSERT_OK(dlb.upload(lb));
    PA_ASSERT_OK(dlo.alloc(la.size() * 4));
    PA_ASSERT_OK(merge_attention_states(
        TensorView::contiguous(da.get(), dt, {T, H, D}, dev),
        TensorView::contiguous(dla.get(), DType::kFloat32, {T, H}, dev),
        TensorView::contiguous(db.get(), dt, {T, H, D}, dev),
        TensorView::contiguous(dlb.get(), DType::kFloat32, {T, H}, dev),
        TensorView::contiguous(da.get(), dt, {T, H, D}, dev),
        TensorView::contiguous(dlo.get(), DType::kFloat32, {T, H}, dev)));
    PA_ASSERT_OK(cuda::device_synchronize());
    const std::vector<std::uint8_t> gpu_out = da.bytes();
    std::vector<float> gpu_lse(la.size());
    PA_ASSERT_OK(dlo.download(gpu_lse.data(), gpu_lse.size() * 4));
    const auto tol = testing::tolerance_for(dt, dt);
    for (std::int64_t i = 0; i < T * H * D; ++i) {
      const double g = numeric::load_as_float(gpu_out.data(), dt, i);
      const double c = numeric::load_as_float(cpu_out.data(), dt, i);
      if (std::isnan(c)) {
        ASSERT_TRUE(std::isnan(g)) << "element " << i << ": " << g << ", CPU NaN";
        continue;
      }
      ASSERT_LE(std::fabs(g - c), tol.atol + tol.rtol * std::fabs(c)) << "element " << i;
    }
    for (std::int64_t r : {10, 12, 14}) EXPECT_TRUE(std::isnan(cpu_lse[r])) << "lse " << r;
    for (std::int64_t i = 0; i < T * H; ++i) {
      if (std::isnan(cpu_lse[i])) {
        EXPECT_TRUE(std::isnan(gpu_lse[i])) << "lse " << i;
      } else if (std::isinf(cpu_lse[i])) {
        EXPECT_EQ(gpu_lse[i], cpu_lse[i]) << "lse " << i;
      } else {
        EXPECT_NEAR(gpu_lse[i], cpu_lse[i], 1e-5 + 1e-5 * std::fabs(cpu_lse[i])) << "lse " << i;
      }
    }
  }
}

// ------------------------------------------------------------------ graphs and determinism

ProblemSpec mixed_spec(int forced_splits) {
  ProblemSpec s;
  s.layout = KVLayout::kNHD;
  s.num_heads = 12;
  s.num_kv_heads = 4;
  s.head_size = 96;
  s.block_size = 32;
  s.dtype = s.kv_dtype = DType::kBFloat16;
  s.seq_lens = {700, 47, 1, 5, 260};
  s.query_lens = {1, 9, 1, 0, 33};
  s.softcap = 30.0f;
  s.alibi = true;
  s.sinks = true;
  s.sliding_window = 200;
  s.plan.num_splits = forced_splits;
  return s;
}

TEST(CudaGraph, CaptureAndReplayEqualEager) {
  PA_SKIP_WITHOUT_GPU();
  for (int splits : {0, 3}) {
    SCOPED_TRACE("num_splits " + std::to_string(splits));
    auto p = Problem::make(mixed_spec(splits));
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    Problem& pr = **p;
    PA_ASSERT_OK(pr.plan());
    ASSERT_NO_FATAL_FAILURE(expect_graph_replay_equals_eager(pr));
  }
}

// A decode batch of the plan tests: 32/8 heads (nhd), bf16 queries, sinks, one new token per
// sequence.
ProblemSpec decode_spec_32_8(int head_size, const std::vector<int>& seq_lens, DType kv_dtype) {
  ProblemSpec s;
  s.layout = KVLayout::kNHD;
  s.num_heads = 32;
  s.num_kv_heads = 8;
  s.head_size = head_size;
  s.dtype = DType::kBFloat16;
  s.kv_dtype = kv_dtype;
  s.seq_lens = seq_lens;
  s.query_lens.assign(seq_lens.size(), 1);
  s.sinks = true;
  return s;
}

// Decode calls whose splits merge in the merge kernel, captured and replayed against eager runs:
// one long sequence, a work list, and head 64 as KV-head pairs. On cc >= 9 the merge kernel is
// a programmatic dependent launch of the split kernel, in the graph as well: one programmatic
// edge.
TEST(CudaGraph, DecodeMergeKernelCaptureAndReplayEqualEager) {
  PA_SKIP_WITHOUT_GPU();
  struct Case {
    const char* what;
    int head_size;
    std::vector<int> seq_lens;
  };
  const Case cases[] = {
      {"merge kernel, head 128", 128, {20000}},
      {"work list, head 128", 128, {9000, 4000, 100}},
      {"merge kernel, head 64 in pairs", 64, {20000}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto p = Problem::make(decode_spec_32_8(c.head_size, c.seq_lens, DType::kBFloat16));
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    Problem& pr = **p;
    PA_ASSERT_OK(pr.plan());
    EXPECT_GT(pr.attention_plan().choice().num_splits, 8) << "the merge kernel, not a cluster";
    int programmatic = -1;
    ASSERT_NO_FATAL_FAILURE(expect_graph_replay_equals_eager(pr, &programmatic));
    auto info = query_device(Device::cuda(0));
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(programmatic, info->cc_major >= 9 ? 1 : 0);
  }
}

// An overflowed key (+inf) in one KV head makes that head's outputs NaN and must leave every
// other head alone, also where two head-64 KV heads share a CTA (decode_mma_pairs_heads): each
// query column takes its scores from its own head's dims only. Both heads of a pair, GQA 1-4,
// one split and several.
TEST(CudaDecode, NonFiniteKeyStaysInItsHead) {
  PA_SKIP_WITHOUT_GPU();
  for (int gqa : {1, 2, 4})
    for (int inf_head : {0, 1})
      for (int splits : {0, 1}) {
        SCOPED_TRACE("gqa " + std::to_string(gqa) + ", inf in KV head " +
                     std::to_string(inf_head) + ", splits " + std::to_string(splits));
        ProblemSpec s;
        s.layout = KVLayout::kNHD;
        s.num_kv_heads = 4;
        s.num_heads = 4 * gqa;
        s.head_size = 64;
        s.dtype = s.kv_dtype = DType::kBFloat16;
        s.seq_lens = {3000, 700};
        s.query_lens = {1, 1};
        s.inf_key_kv_head = inf_head;
        s.plan.num_splits = splits;
        auto p = Problem::make(s);
        ASSERT_TRUE(p.ok()) << p.status().to_string();
        Problem& pr = **p;
        PA_ASSERT_OK(pr.plan());
        PA_ASSERT_OK(pr.poison_outputs());
        PA_ASSERT_OK(pr.run());
        PA_ASSERT_OK(cuda::device_synchronize());
        EXPECT_EQ(pr.check_against_oracle(), "");
      }
}

// A decode graph is captured once and replayed while the sequences grow: the plan (split size,
// split count, workspace) was made for shorter sequences than the device metadata now holds.
// Every decode path must still cover all keys and stay inside its workspace (decode_split.h:
// the last split takes the remainder): single split, cluster merge, merge kernel, work list,
// and the tiled kernel (fp8 cache).
TEST(CudaPlan, RunWithLongerSequencesThanPlanned) {
  PA_SKIP_WITHOUT_GPU();
  struct Case {
    const char* what;
    std::vector<int> real, planned;
    DType kv;
  };
  const Case cases[] = {
      {"one split planned", {3000}, {60}, DType::kBFloat16},
      {"cluster merge planned", {5000}, {1024}, DType::kBFloat16},
      {"merge kernel planned", {20000}, {8192}, DType::kBFloat16},
      {"work list planned", {9000, 4000, 100}, {3000, 64, 100}, DType::kBFloat16},
      {"tiled kernel", {5000, 300}, {1024, 300}, DType::kFloat8E4M3},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto p = Problem::make(decode_spec_32_8(128, c.real, c.kv));
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    Problem& pr = **p;
    const std::vector<std::int32_t> planned(c.planned.begin(), c.planned.end());
    PA_ASSERT_OK(pr.plan_for_lengths(planned));
    PA_ASSERT_OK(pr.poison_outputs());
    PA_ASSERT_OK(pr.run());
    PA_ASSERT_OK(cuda::device_synchronize());
    EXPECT_EQ(pr.check_against_oracle(), "");
  }
}

TEST(CudaDeterminism, TwoRunsBitwiseEqual) {
  PA_SKIP_WITHOUT_GPU();
  for (int splits : {0, 1, 5}) {
    SCOPED_TRACE("num_splits " + std::to_string(splits));
    ProblemSpec s = mixed_spec(splits);
    s.layout = KVLayout::kSplit;
    s.dtype = DType::kFloat16;
    s.kv_dtype = DType::kFloat8E5M2;
    auto p = Problem::make(s);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    Problem& pr = **p;
    PA_ASSERT_OK(pr.plan());
    PA_ASSERT_OK(pr.run());
    PA_ASSERT_OK(cuda::device_synchronize());
    const auto out1 = pr.out_bytes();
    const auto lse1 = pr.lse_bytes();
    EXPECT_EQ(pr.check_against_oracle(), "");
    PA_ASSERT_OK(pr.poison_outputs());
    PA_ASSERT_OK(cuda::device_synchronize());
    PA_ASSERT_OK(pr.run());
    PA_ASSERT_OK(cuda::device_synchronize());
    EXPECT_TRUE(pr.out_bytes() == out1);
    EXPECT_TRUE(pr.lse_bytes() == lse1);
  }
}

// The CUDA selection never asks for more shared memory than the device allows, whatever the
// block size (the 2048-token-block LDS failure of vLLM).
TEST(CudaSelect, SharedMemoryWithinDeviceLimit) {
  PA_SKIP_WITHOUT_GPU();
  auto info = query_device(Device::cuda(0));
  ASSERT_TRUE(info.ok());
  for (int d : {8, 64, 128, 192, 256})
    for (DType dt : {DType::kFloat32, DType::kBFloat16, DType::kFloat8E4M3})
      for (int mql : {1, 512}) {
        ProblemDesc pd;
        pd.device = Device::cuda(0);
        pd.num_heads = 64;
        pd.num_kv_heads = 1;
        pd.head_size = d;
        pd.q_dtype = dt == DType::kFloat8E4M3 ? DType::kBFloat16 : dt;
        pd.cache_dtype = dt;
        pd.layout = KVLayout::kNHD;
        pd.block_size = 2048;
        pd.num_blocks = 100;
        pd.batch.num_seqs = 1;
        pd.batch.num_tokens = mql;
        pd.batch.max_query_len = mql;
        pd.batch.max_seq_len = 100000;
        auto c = select_kernel(pd, *info);
        ASSERT_TRUE(c.ok()) << c.status().to_string();
        EXPECT_LE(c->shared_memory_bytes, info->max_shared_memory_per_block);
        EXPECT_GE(c->tile_tokens, 1);
      }
}

}  // namespace
}  // namespace pagedattn::cudatest
