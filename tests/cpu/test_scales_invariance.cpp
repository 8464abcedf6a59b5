// fp8 scales as tensors (KVCache::k_scales / v_scales) and batch-invariant plans on the CPU
// backend: per-KV-head scales against a hand-computed result, a one-element tensor giving the
// scalar's bits, and a sequence's output and LSE bit for bit alone and inside batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "pagedattn/pagedattn.h"
#include "src/core/numeric.h"
#include "src/testing/harness.h"
#include "src/testing/invariance.h"

namespace pagedattn {
namespace {

// One sequence of 3 keys, 2 query heads over 2 KV heads, head 8, an e4m3 nhd cache whose KV
// heads have scales 0.5 / 2 (keys) and 0.25 / 4 (values). Every input is scale_g times a
// small multiple of 0.5, so fp8(x / scale_g) is exact and the dequantised cache equals the
// input: the softmax can be computed by hand in double. A writer that divides by another
// head's scale (or the host scalar 1) stores other codes; a reader that multiplies by one
// gives other outputs.
struct PerHeadFixture {
  static constexpr int H = 2, KVH = 2, D = 8, BS = 4, NB = 2, L = 3;
  std::vector<float> ks{0.5f, 2.0f}, vs{0.25f, 4.0f};
  std::vector<float> key, value, query;
  std::vector<std::uint8_t> kc, vc;
  std::vector<std::int64_t> slots{4, 5, 6};  // block 1, tokens 0..2
  std::vector<std::int32_t> block_table{1}, seq_lens{L}, qsl{0, 1};
  KVCache cache;

  static float code(int t, int g, int d, int salt) {
    return 0.5f * static_cast<float>((t * 3 + d * 5 + g + salt) % 7 - 3);  // -1.5 .. 1.5
  }
  PerHeadFixture() {
    for (int t = 0; t < L; ++t)
      for (int g = 0; g < KVH; ++g)
        for (int d = 0; d < D; ++d) {
          key.push_back(ks[g] * code(t, g, d, 0));
          value.push_back(vs[g] * code(t, g, d, 2));
        }
    for (int h = 0; h < H; ++h)
      for (int d = 0; d < D; ++d) query.push_back(0.25f * static_cast<float>((h + 2 * d) % 5 - 2));
    kc.assign(NB * BS * KVH * D, 0x7F);
    vc.assign(NB * BS * KVH * D, 0x7F);
    cache.layout = KVLayout::kNHD;
    cache.key = TensorView::contiguous(kc.data(), DType::kFloat8E4M3, {NB, BS, KVH, D});
    cache.value = TensorView::contiguous(vc.data(), DType::kFloat8E4M3, {NB, BS, KVH, D});
    cache.k_scale = 1.0f;  // must be ignored: the tensors replace it
    cache.v_scale = 1.0f;
    cache.k_scales = TensorView::contiguous(ks.data(), DType::kFloat32, {KVH});
    cache.v_scales = TensorView::contiguous(vs.data(), DType::kFloat32, {KVH});
  }
  Status write() {
    const TensorView k = TensorView::contiguous(key.data(), DType::kFloat32, {L, KVH, D});
    const TensorView v = TensorView::contiguous(value.data(), DType::kFloat32, {L, KVH, D});
    return write_kv(k, v, TensorView::contiguous(slots.data(), DType::kInt64, {L}), cache);
  }
  AttentionArgs args(std::vector<float>* out, std::vector<float>* lse) {
    out->assign(H * D, NAN);
    lse->assign(H, NAN);
    AttentionArgs a;
    a.query = TensorView::contiguous(query.data(), DType::kFloat32, {1, H, D});
    a.out = TensorView::contiguous(out->data(), DType::kFloat32, {1, H, D});
    a.lse = TensorView::contiguous(lse->data(), DType::kFloat32, {1, H});
    a.cache = cache;
    a.block_table = TensorView::contiguous(block_table.data(), DType::kInt32, {1, 1});
    a.seq_lens = TensorView::contiguous(seq_lens.data(), DType::kInt32, {1});
    a.query_start_loc = TensorView::contiguous(qsl.data(), DType::kInt32, {2});
    a.params.scale = 0.9f;
    return a;
  }
  /// softmax(0.9 q.k_j) v_j and the log-sum-exp, in double, for query head h (= KV head h).
  void by_hand(int h, std::vector<double>* o, double* l) const {
    double z[L], m = -INFINITY;
    for (int t = 0; t < L; ++t) {
      double dot = 0;
      for (int d = 0; d < D; ++d)
        dot += static_cast<double>(query[h * D + d]) * key[(t * KVH + h) * D + d];
      z[t] = static_cast<double>(0.9f) * dot;
      m = std::max(m, z[t]);
    }
    double sum = 0;
    o->assign(D, 0.0);
    for (int t = 0; t < L; ++t) {
      const double p = std::exp(z[t] - m);
      sum += p;
      for (int d = 0; d < D; ++d) (*o)[d] += p * value[(t * KVH + h) * D + d];
    }
    for (double& v : *o) v /= sum;
    *l = m + std::log(sum);
  }
};

TEST(DeviceScales, WriterStoresEachHeadOverItsOwnScale) {
  PerHeadFixture f;
  ASSERT_TRUE(f.write().ok());
  for (int t = 0; t < f.L; ++t)
    for (int g = 0; g < f.KVH; ++g)
      for (int d = 0; d < f.D; ++d) {
        const std::size_t at = static_cast<std::size_t>(((f.BS + t) * f.KVH + g) * f.D + d);
        ASSERT_EQ(f.kc[at], numeric::float_to_e4m3(PerHeadFixture::code(t, g, d, 0)))
            << "key t " << t << " head " << g << " dim " << d;
        ASSERT_EQ(f.vc[at], numeric::float_to_e4m3(PerHeadFixture::code(t, g, d, 2)))
            << "value t " << t << " head " << g << " dim " << d;
      }
  // The writer oracle agrees bit for bit.
  std::vector<std::uint8_t> rk(f.kc.size(), 0x7F), rv(f.vc.size(), 0x7F);
  KVCache ref = f.cache;
  ref.key.data = rk.data();
  ref.value.data = rv.data();
  const TensorView k = TensorView::contiguous(f.key.data(), DType::kFloat32, {f.L, f.KVH, f.D});
  const TensorView v = TensorView::contiguous(f.value.data(), DType::kFloat32, {f.L, f.KVH, f.D});
  ASSERT_TRUE(
      reference_write_kv(k, v, TensorView::contiguous(f.slots.data(), DType::kInt64, {f.L}), ref).ok());
  EXPECT_TRUE(rk == f.kc && rv == f.vc);
}

// Host-resident parameter tensors are checked at run time like their scalar twins: a scale
// tensor element that is NaN, inf, 0 or negative, a sink that is NaN or +inf, an ALiBi slope
// that is not finite. The error names the element; the output and the cache stay as they were.
TEST(DeviceScales, BadHostParameterValuesAreErrorsThatWriteNothing) {
  const float nan = std::nanf(""), inf = INFINITY;
  struct Bad {
    const char* tensor;
    int index;
    float value;
    const char* expect;
  };
  const Bad cases[] = {
      {"k_scales", 1, nan, "k_scales[1] = nan: expected a finite value > 0"},
      {"k_scales", 0, inf, "k_scales[0] = inf: expected a finite value > 0"},
      {"v_scales", 1, 0.0f, "v_scales[1] = 0.000000: expected a finite value > 0"},
      {"v_scales", 0, -1.0f, "v_scales[0] = -1.000000: expected a finite value > 0"},
      {"sinks", 1, nan, "sinks[1] = nan: expected a finite value or -inf (no sink)"},
      {"sinks", 0, inf, "sinks[0] = inf: expected a finite value or -inf (no sink)"},
      {"alibi_slopes", 1, -inf, "alibi_slopes[1] = -inf: expected a finite value"},
  };
  for (const Bad& b : cases) {
    SCOPED_TRACE(b.expect);
    PerHeadFixture f;
    ASSERT_TRUE(f.write().ok());
    std::vector<float> sinks{0.5f, -INFINITY}, slopes{0.25f, 0.5f};
    if (std::string(b.tensor) == "k_scales") f.ks[static_cast<std::size_t>(b.index)] = b.value;
    if (std::string(b.tensor) == "v_scales") f.vs[static_cast<std::size_t>(b.index)] = b.value;
    if (std::string(b.tensor) == "sinks") sinks[static_cast<std::size_t>(b.index)] = b.value;
    if (std::string(b.tensor) == "alibi_slopes") slopes[static_cast<std::size_t>(b.index)] = b.value;
    std::vector<float> out, lse;
    AttentionArgs a = f.args(&out, &lse);
    a.params.sinks = TensorView::contiguous(sinks.data(), DType::kFloat32, {f.H});
    a.params.alibi_slopes = TensorView::contiguous(slopes.data(), DType::kFloat32, {f.H});
    std::vector<float> out_before = out;
    auto plan = plan_attention(a, HostMetadata::from_args(a));
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();  // values are a run-time matter
    std::vector<unsigned char> ws(plan->workspace_bytes());
    const Status st = run_attention(*plan, a, ws.data(), ws.size());
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find(b.expect), std::string::npos) << st.to_string();
    EXPECT_EQ(std::memcmp(out.data(), out_before.data(), out.size() * sizeof(float)), 0)
        << "out was written";
    for (float x : lse) EXPECT_TRUE(std::isnan(x)) << "lse was written";
    // The writer divides by the scales: it refuses them too, and the cache keeps its codes.
    const std::string t = b.tensor;
    if (t == "k_scales" || t == "v_scales") {
      const std::vector<std::uint8_t> kc = f.kc, vc = f.vc;
      const Status w = f.write();
      EXPECT_EQ(w.code(), StatusCode::kInvalidArgument);
      EXPECT_NE(w.message().find(b.expect), std::string::npos) << w.to_string();
      EXPECT_TRUE(kc == f.kc && vc == f.vc) << "the cache was written";
    }
  }
  // -inf sinks and finite values pass (the control).
  PerHeadFixture f;
  ASSERT_TRUE(f.write().ok());
  std::vector<float> sinks{-INFINITY, 1.0f}, slopes{0.0f, -0.5f};
  std::vector<float> out, lse;
  AttentionArgs a = f.args(&out, &lse);
  a.params.sinks = TensorView::contiguous(sinks.data(), DType::kFloat32, {f.H});
  a.params.alibi_slopes = TensorView::contiguous(slopes.data(), DType::kFloat32, {f.H});
  EXPECT_TRUE(paged_attention(a, HostMetadata::from_args(a)).ok());
  for (float x : out) EXPECT_TRUE(std::isfinite(x));
}

TEST(DeviceScales, PerHeadScalesMatchTheHandComputedResult) {
  PerHeadFixture f;
  ASSERT_TRUE(f.write().ok());
  std::vector<float> out, lse, ref_out, ref_lse;
  const AttentionArgs a = f.args(&out, &lse);
  ASSERT_TRUE(paged_attention(a, HostMetadata::from_args(a)).ok());
  const AttentionArgs r = f.args(&ref_out, &ref_lse);
  ASSERT_TRUE(reference_attention(r).ok());
  for (int h = 0; h < f.H; ++h) {
    std::vector<double> o;
    double l = 0;
    f.by_hand(h, &o, &l);
    for (int d = 0; d < f.D; ++d) {
      EXPECT_NEAR(out[h * f.D + d], o[d], 1e-5 * (1 + std::fabs(o[d]))) << "backend head " << h << " dim " << d;
      EXPECT_NEAR(ref_out[h * f.D + d], o[d], 1e-6 * (1 + std::fabs(o[d]))) << "oracle head " << h << " dim " << d;
    }
    EXPECT_NEAR(lse[h], l, 1e-5 * (1 + std::fabs(l))) << "backend lse head " << h;
    EXPECT_NEAR(ref_lse[h], l, 1e-6 * (1 + std::fabs(l))) << "oracle lse head " << h;
  }
  // The values of head 1 are 4 x its codes: a reader using head 0's scale (or the scalar)
  // would be off by 16x or 4x, far outside the budget above.
  ASSERT_GT(std::fabs(out[f.D]), 0.05f);
}

TEST(DeviceScales, OneElementTensorGivesTheScalarsBits) {
  // Scales that are not powers of two, as a scalar and as [1] tensors (with other scalars,
  // which must be ignored): the same cache bytes and the same output bits.
  std::vector<std::vector<std::uint8_t>> caches;
  std::vector<std::vector<float>> outs, lses;
  for (bool tensor : {false, true}) {
    PerHeadFixture f;
    for (std::size_t i = 0; i < f.key.size(); ++i) {
      f.key[i] = 0.037f * static_cast<float>(static_cast<int>(i % 23) - 11);
      f.value[i] = 0.029f * static_cast<float>(static_cast<int>(i % 19) - 9);
    }
    f.ks = {0.3f};
    f.vs = {0.7f};
    if (tensor) {
      f.cache.k_scales = TensorView::contiguous(f.ks.data(), DType::kFloat32, {1});
      f.cache.v_scales = TensorView::contiguous(f.vs.data(), DType::kFloat32, {1});
      f.cache.k_scale = 5.0f;
      f.cache.v_scale = 7.0f;
    } else {
      f.cache.k_scales = TensorView{};
      f.cache.v_scales = TensorView{};
      f.cache.k_scale = 0.3f;
      f.cache.v_scale = 0.7f;
    }
    ASSERT_TRUE(f.write().ok());
    std::vector<float> out, lse;
    const AttentionArgs a = f.args(&out, &lse);
    ASSERT_TRUE(paged_attention(a, HostMetadata::from_args(a)).ok());
    caches.push_back(f.kc);
    caches.back().insert(caches.back().end(), f.vc.begin(), f.vc.end());
    outs.push_back(out);
    lses.push_back(lse);
  }
  EXPECT_TRUE(caches[0] == caches[1]) << "the writer stored other codes with a [1] tensor";
  EXPECT_EQ(std::memcmp(outs[0].data(), outs[1].data(), outs[0].size() * 4), 0);
  EXPECT_EQ(std::memcmp(lses[0].data(), lses[1].data(), lses[0].size() * 4), 0);
}

TEST(DeviceScales, ScalarTensorAndPerHeadScalesPassTheHarness) {
  // The harness's three scale modes on a mixed batch: writer bit-exact against the writer
  // oracle, attention within the budget of the oracle.
  for (DType kv : {DType::kFloat8E4M3, DType::kFloat8E5M2}) {
    testing::CaseConfig c;
    c.kv_dtype = kv;
    c.dtype = DType::kBFloat16;
    c.seq_lens = {70, 20};
    c.query_lens = {1, 5};
    c.k_scale = 0.03f;
    c.v_scale = 0.02f;
    for (testing::ScaleMode m : {testing::ScaleMode::kHost, testing::ScaleMode::kTensor,
                                 testing::ScaleMode::kPerHead}) {
      c.scales = m;
      c.name = testing::case_name(c);
      const testing::CaseResult r = testing::run_case(c);
      ASSERT_TRUE(r.status.ok()) << c.name << ": " << r.status.to_string();
      EXPECT_TRUE(r.writer_exact) << c.name << ": " << r.detail;
      EXPECT_TRUE(r.pass) << c.name << ": " << r.detail;
    }
  }
}

// ---------------------------------------------------------------- batch invariance
testing::InvarianceResult check(testing::InvarianceConfig c) {
  c.device = Device::cpu();
  c.plan.batch_invariant = true;
  c.plan.num_threads = 2;
  return testing::check_batch_invariance(c);
}

TEST(BatchInvariance, CpuDecodeAloneAndInBatchesIsBitIdentical) {
  testing::InvarianceConfig c;
  c.head_size = 72;
  c.subject = {3000, 1};
  c.others = {{100, 1}, {9000, 1}, {7, 1}, {2049, 1}};
  for (int at : {0, 2, 4}) {
    c.subject_index = at;
    const testing::InvarianceResult r = check(c);
    ASSERT_TRUE(r.status.ok()) << r.status.to_string();
    EXPECT_EQ(r.alone.kernel, KernelId::kCpuTiled);
    EXPECT_TRUE(r.out_equal) << "position " << at << ": " << r.detail;
    EXPECT_TRUE(r.lse_equal) << "position " << at << ": " << r.detail;
  }
}

TEST(BatchInvariance, CpuPrefillAndFp8AloneAndInBatchesAreBitIdentical) {
  testing::InvarianceConfig c;
  c.head_size = 128;
  c.num_heads = 16;
  c.num_kv_heads = 4;
  c.dtype = DType::kBFloat16;
  c.kv_dtype = DType::kFloat8E4M3;
  c.sliding_window = 700;
  c.subject = {1500, 70};  // a prefill chunk whose rows cross the window edge
  c.others = {{300, 1}, {4000, 33}, {64, 64}};
  c.subject_index = 1;
  const testing::InvarianceResult r = check(c);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_TRUE(r.out_equal) << r.detail;
  EXPECT_TRUE(r.lse_equal) << r.detail;
}

// check_each_sequence_alone (what `pagedattn verify --batch-invariant` runs): decode rows,
// prefill chunks and a sequence without query rows, with the position features; the rows are
// found at each sequence's own offset (a wrong offset would compare another sequence's rows).
TEST(BatchInvariance, CpuEverySequenceAloneIsBitIdentical) {
  testing::InvarianceConfig c;
  c.device = Device::cpu();
  c.plan.batch_invariant = true;
  c.plan.num_threads = 2;
  c.head_size = 64;
  c.sinks = c.alibi = true;
  c.softcap = 20.0f;
  c.sliding_window = 900;
  const testing::EachAloneResult r =
      testing::check_each_sequence_alone(c, {{300, 1}, {1500, 40}, {64, 0}, {2000, 1}, {33, 33}});
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_EQ(r.checked, 4);
  EXPECT_TRUE(r.differing.empty()) << r.detail;
  EXPECT_EQ(r.batched.kernel, KernelId::kCpuTiled);
}

}  // namespace
}  // namespace pagedattn
