// The public API called from several host threads at once (serving engines run one model
// worker per thread, or layers of different requests in parallel): no hidden per-process state
// may make one call's result depend on another's. Each thread works on its own data; every
// result is checked against the oracle, and a plan shared by all threads (one plan serves every
// layer of a step) gives every thread the bits a single-threaded run gives.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "pagedattn/pagedattn.h"
#include "pagedattn/reference.h"
#include "src/core/numeric.h"
#include "src/testing/harness.h"
#include "tests/run_together.h"

namespace pagedattn {
namespace {

using testutil::run_together;

TEST(Concurrency, RunCaseFromManyThreadsMatchesTheOracle) {
  // Different layouts, dtypes, head sizes, GQA ratios and features per thread, each run
  // several times, so that calls of different shapes overlap in time.
  std::vector<testing::CaseConfig> cases;
  const KVLayout layouts[] = {KVLayout::kNHD, KVLayout::kHND, KVLayout::kSplit};
  const DType dtypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
  for (int i = 0; i < 8; ++i) {
    testing::CaseConfig c;
    c.layout = layouts[i % 3];
    c.dtype = c.kv_dtype = dtypes[(i / 3) % 3];
    if (i == 7) c.kv_dtype = DType::kFloat8E4M3;
    c.num_heads = 8;
    c.num_kv_heads = (i % 2) ? 2 : 8;
    c.head_size = (i % 4 == 3) ? 128 : 64;
    c.block_size = (i % 3 == 1) ? 5 : 16;
    c.seq_lens = {1 + 13 * i, 40, 3 + i, 70};
    c.query_lens = {1, 7, 0, 1 + i};
    c.sliding_window = (i == 2) ? 9 : 0;
    c.alibi = i == 3;
    c.sinks = i == 5;
    c.softcap = i == 6 ? 20.0f : 0.0f;
    c.page_pad = i == 4 ? 24 : 0;
    c.plan.num_threads = 1 + i % 3;
    c.seed = 100 + static_cast<std::uint64_t>(i);
    cases.push_back(c);
  }
  std::vector<std::string> failures(cases.size());
  run_together(static_cast<int>(cases.size()), [&](int i) {
    for (int rep = 0; rep < 3; ++rep) {
      const testing::CaseResult r = testing::run_case(cases[static_cast<std::size_t>(i)]);
      if (!r.status.ok() || !r.pass || !r.writer_exact) {
        failures[static_cast<std::size_t>(i)] =
            testing::case_name(cases[static_cast<std::size_t>(i)]) + ": " + r.status.to_string() +
            " pass=" + std::to_string(r.pass) + " writer_exact=" + std::to_string(r.writer_exact) +
            " " + r.detail;
        return;
      }
    }
  });
  for (const std::string& f : failures) EXPECT_TRUE(f.empty()) << f;
}

/// One "layer": its own cache, query and outputs, over a batch shared by all layers.
struct Layer {
  std::vector<float> k, v, q, out, lse, ref_out, ref_lse;
  KVCache cache;
};

TEST(Concurrency, OnePlanServesLayersOnManyThreadsBitExactly) {
  constexpr int H = 8, KVH = 2, D = 64, BS = 16, NB = 24, L = 12;
  const std::vector<std::int32_t> seq_lens{37, 1, 80, 5};
  const std::vector<std::int32_t> qsl{0, 1, 2, 9, 14};  // decode, decode, prefill 7, prefill 5
  const std::int64_t T = qsl.back();
  const std::int64_t S = static_cast<std::int64_t>(seq_lens.size());
  const std::int64_t W = 6;
  std::vector<std::int32_t> bt(static_cast<std::size_t>(S * W));
  std::mt19937 rng(7);
  std::vector<std::int32_t> perm(NB);
  for (int i = 0; i < NB; ++i) perm[static_cast<std::size_t>(i)] = i;
  std::shuffle(perm.begin(), perm.end(), rng);
  for (std::size_t i = 0; i < bt.size(); ++i) bt[i] = perm[i % NB];

  KVCacheSpec spec{KVLayout::kNHD, NB, BS, KVH, D, DType::kFloat32, 0};
  const std::int64_t cache_elems = *kv_cache_elements(spec);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<Layer> layers(L);
  for (Layer& l : layers) {
    l.k.resize(static_cast<std::size_t>(cache_elems));
    l.v.resize(l.k.size());
    for (float& x : l.k) x = u(rng);
    for (float& x : l.v) x = u(rng);
    l.q.resize(static_cast<std::size_t>(T * H * D));
    for (float& x : l.q) x = u(rng);
    l.out.assign(l.q.size(), NAN);
    l.lse.assign(static_cast<std::size_t>(T * H), NAN);
    l.ref_out.assign(l.q.size(), NAN);
    l.ref_lse.assign(l.lse.size(), NAN);
    l.cache = *make_kv_cache(spec, l.k.data(), l.v.data());
  }
  auto args_for = [&](Layer& l, std::vector<float>& out, std::vector<float>& lse) {
    AttentionArgs a;
    a.query = TensorView::contiguous(l.q.data(), DType::kFloat32, {T, H, D});
    a.cache = l.cache;
    a.block_table = TensorView::contiguous(bt.data(), DType::kInt32, {S, W});
    a.seq_lens = TensorView::contiguous(const_cast<std::int32_t*>(seq_lens.data()),
                                        DType::kInt32, {S});
    a.query_start_loc =
        TensorView::contiguous(const_cast<std::int32_t*>(qsl.data()), DType::kInt32, {S + 1});
    a.out = TensorView::contiguous(out.data(), DType::kFloat32, {T, H, D});
    a.lse = TensorView::contiguous(lse.data(), DType::kFloat32, {T, H});
    a.params.scale = 4 * default_scale(D);
    return a;
  };
  PlanOptions opts;
  opts.num_threads = 3;
  opts.tile_tokens = 16;
  AttentionArgs first = args_for(layers[0], layers[0].out, layers[0].lse);
  auto plan = plan_attention(first, HostMetadata::from_args(first), opts);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  // Single-threaded results first (same plan), then the oracle.
  for (Layer& l : layers) {
    AttentionArgs a = args_for(l, l.ref_out, l.ref_lse);
    ASSERT_TRUE(run_attention(*plan, a, nullptr, 0).ok());
    std::vector<float> oracle_out(l.q.size()), oracle_lse(l.lse.size());
    AttentionArgs o = args_for(l, oracle_out, oracle_lse);
    ASSERT_TRUE(reference_attention(o).ok());
    for (std::size_t i = 0; i < oracle_out.size(); ++i)
      ASSERT_NEAR(l.ref_out[i], oracle_out[i], 1e-4 + 1e-4 * std::fabs(oracle_out[i])) << i;
    for (std::size_t i = 0; i < oracle_lse.size(); ++i)
      ASSERT_NEAR(l.ref_lse[i], oracle_lse[i], 1e-4 + 1e-4 * std::fabs(oracle_lse[i])) << i;
  }
  std::vector<int> bad(L, 0);
  run_together(L, [&](int i) {
    Layer& l = layers[static_cast<std::size_t>(i)];
    for (int rep = 0; rep < 4; ++rep) {
      std::fill(l.out.begin(), l.out.end(), NAN);
      AttentionArgs a = args_for(l, l.out, l.lse);
      if (!run_attention(*plan, a, nullptr, 0).ok() ||
          std::memcmp(l.out.data(), l.ref_out.data(), l.out.size() * sizeof(float)) != 0 ||
          std::memcmp(l.lse.data(), l.ref_lse.data(), l.lse.size() * sizeof(float)) != 0)
        bad[static_cast<std::size_t>(i)] = 1;
    }
  });
  for (int i = 0; i < L; ++i) EXPECT_EQ(bad[static_cast<std::size_t>(i)], 0) << "layer " << i;
}

TEST(Concurrency, WriteKvAndMergeFromManyThreadsMatchTheirOracles) {
  constexpr int N = 8;
  std::vector<int> bad(N, 0);
  run_together(N, [&](int i) {
    std::mt19937 rng(static_cast<unsigned>(i + 1));
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    const KVLayout layout = i % 3 == 0 ? KVLayout::kSplit : (i % 3 == 1 ? KVLayout::kNHD : KVLayout::kHND);
    const DType dt = i % 2 ? DType::kBFloat16 : DType::kFloat8E5M2;
    KVCacheSpec spec{layout, 6, 7, 2, 32, dt, i % 4 == 1 ? 16 : 0};
    const std::int64_t elems = *kv_cache_elements(spec);
    const std::size_t bytes = static_cast<std::size_t>(elems) * dtype_size(dt);
    std::vector<unsigned char> k(bytes, 0xA5), v(bytes, 0x5A), rk(k), rv(v);
    const KVCache cache = *make_kv_cache(spec, k.data(), v.data(), Device::cpu(), 0.5f, 2.0f);
    const KVCache rcache = *make_kv_cache(spec, rk.data(), rv.data(), Device::cpu(), 0.5f, 2.0f);
    const std::int64_t T = 20;
    std::vector<float> key(static_cast<std::size_t>(T * 2 * 32)), value(key.size());
    for (float& x : key) x = u(rng);
    for (float& x : value) x = u(rng);
    std::vector<std::int64_t> slots(static_cast<std::size_t>(T));
    for (std::int64_t t = 0; t < T; ++t) slots[static_cast<std::size_t>(t)] = (t * 5 + i) % 42;
    slots[3] = -1;
    // Distinct slots: t * 5 mod 42 is a bijection on 0..41 for t < 42; slot -1 is padding.
    const DType kdt = dt == DType::kBFloat16 ? DType::kBFloat16 : DType::kFloat32;
    std::vector<unsigned char> kb(key.size() * dtype_size(kdt)), vb(kb.size());
    for (std::size_t j = 0; j < key.size(); ++j) {
      numeric::store_from_float(kb.data(), kdt, static_cast<std::int64_t>(j), key[j]);
      numeric::store_from_float(vb.data(), kdt, static_cast<std::int64_t>(j), value[j]);
    }
    const TensorView kv = TensorView::contiguous(kb.data(), kdt, {T, 2, 32});
    const TensorView vv = TensorView::contiguous(vb.data(), kdt, {T, 2, 32});
    const TensorView sm = TensorView::contiguous(slots.data(), DType::kInt64, {T});
    for (int rep = 0; rep < 5; ++rep) {
      if (!write_kv(kv, vv, sm, cache).ok()) bad[static_cast<std::size_t>(i)] = 1;
    }
    if (!reference_write_kv(kv, vv, sm, rcache).ok()) bad[static_cast<std::size_t>(i)] = 2;
    if (k != rk || v != rv) bad[static_cast<std::size_t>(i)] = 3;

    // merge_attention_states against the formula of its documentation.
    const std::int64_t MT = 9, MH = 3, MD = 40;
    std::vector<float> a(static_cast<std::size_t>(MT * MH * MD)), b(a.size()), o(a.size());
    std::vector<float> la(static_cast<std::size_t>(MT * MH)), lb(la.size()), lo(la.size());
    for (float& x : a) x = u(rng);
    for (float& x : b) x = u(rng);
    for (float& x : la) x = 3 * u(rng);
    for (float& x : lb) x = 3 * u(rng);
    for (int rep = 0; rep < 5; ++rep) {
      if (!merge_attention_states(TensorView::contiguous(a.data(), DType::kFloat32, {MT, MH, MD}),
                                  TensorView::contiguous(la.data(), DType::kFloat32, {MT, MH}),
                                  TensorView::contiguous(b.data(), DType::kFloat32, {MT, MH, MD}),
                                  TensorView::contiguous(lb.data(), DType::kFloat32, {MT, MH}),
                                  TensorView::contiguous(o.data(), DType::kFloat32, {MT, MH, MD}),
                                  TensorView::contiguous(lo.data(), DType::kFloat32, {MT, MH}))
               .ok())
        bad[static_cast<std::size_t>(i)] = 4;
    }
    for (std::int64_t r = 0; r < MT * MH; ++r) {
      const double l = std::log(std::exp(double(la[r])) + std::exp(double(lb[r])));
      if (std::fabs(lo[r] - l) > 1e-5) bad[static_cast<std::size_t>(i)] = 5;
      for (std::int64_t d = 0; d < MD; ++d) {
        const std::size_t e = static_cast<std::size_t>(r * MD + d);
        const double want = std::exp(la[r] - l) * a[e] + std::exp(lb[r] - l) * b[e];
        if (std::fabs(o[e] - want) > 1e-5) bad[static_cast<std::size_t>(i)] = 6;
      }
    }
  });
  for (int i = 0; i < N; ++i) EXPECT_EQ(bad[static_cast<std::size_t>(i)], 0) << "thread " << i;
}

}  // namespace
}  // namespace pagedattn
