// Smoke tests of the CPU backend against the oracles: the writer bitwise against
// reference_write_kv, attention within the fp32/fp16/bf16 budget against reference_attention,
// over a compact set of configurations chosen to hit the backend's own boundaries (tiles
// smaller than, equal to and larger than blocks; tiles straddling blocks; windows starting
// inside a tile; GQA groups; skipped sequences; padded pages). The exhaustive matrix lives in
// the shared test cases; this file keeps the backend honest on its own.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "pagedattn/pagedattn.h"
#include "src/core/numeric.h"

namespace pagedattn {
namespace {

void fill_nan(std::vector<unsigned char>& bytes, DType dtype) {
  const std::size_t es = dtype_size(dtype);
  for (std::size_t i = 0; i + es <= bytes.size(); i += es) {
    numeric::store_from_float(bytes.data(), dtype, static_cast<std::int64_t>(i / es), NAN);
  }
}

std::vector<unsigned char> random_tensor(std::int64_t n, DType dtype, std::mt19937_64& rng,
                                         float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<unsigned char> bytes(static_cast<std::size_t>(n) * dtype_size(dtype));
  for (std::int64_t i = 0; i < n; ++i) numeric::store_from_float(bytes.data(), dtype, i, u(rng));
  return bytes;
}

struct Config {
  KVLayout layout = KVLayout::kNHD;
  int num_heads = 4;
  int num_kv_heads = 1;
  int head_size = 32;
  int block_size = 16;
  DType dtype = DType::kFloat32;
  DType kv_dtype = DType::kFloat32;
  std::vector<int> seq_lens{17};
  std::vector<int> query_lens{1};
  int window = 0;
  float softcap = 0.0f;
  bool alibi = false;
  bool sinks = false;
  std::int64_t page_pad = 0;
  int tile = 0;
  float k_scale = 1.0f;
  float v_scale = 1.0f;
  std::uint64_t seed = 1;
};

std::string describe(const Config& c) {
  std::string s = std::string(to_string(c.layout)) + " q" + std::to_string(c.num_heads) + "kv" +
                  std::to_string(c.num_kv_heads) + " h" + std::to_string(c.head_size) + " bs" +
                  std::to_string(c.block_size) + " " + to_string(c.dtype) + "/" +
                  to_string(c.kv_dtype) + " tile" + std::to_string(c.tile) + " window" +
                  std::to_string(c.window) + " softcap" + std::to_string(c.softcap) +
                  (c.alibi ? " alibi" : "") + (c.sinks ? " sinks" : "") + " pad" +
                  std::to_string(c.page_pad) + " seqs";
  for (std::size_t i = 0; i < c.seq_lens.size(); ++i) {
    s += " " + std::to_string(c.query_lens[i]) + "/" + std::to_string(c.seq_lens[i]);
  }
  return s;
}

double budget(DType dtype) {
  switch (dtype) {
    case DType::kFloat16: return 1e-3;
    case DType::kBFloat16: return 8e-3;
    default: return 1e-5;
  }
}

/// Write a random batch into a NaN-poisoned cache with both writers (bitwise equal), then run
/// attention on the CPU backend and the oracle and compare.
void check(const Config& c, int num_threads = 0) {
  SCOPED_TRACE(describe(c));
  std::mt19937_64 rng(c.seed);
  const int S = static_cast<int>(c.seq_lens.size());
  const int bs = c.block_size;
  std::vector<int> nblocks(S);
  int needed = 0, width = 1;
  for (int s = 0; s < S; ++s) {
    nblocks[s] = (c.seq_lens[s] + bs - 1) / bs;
    needed += nblocks[s];
    width = std::max(width, nblocks[s]);
  }
  const int pool = needed + 3;  // more blocks than needed, assigned in a random order
  std::vector<std::int32_t> perm(pool);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<std::int32_t> bt(static_cast<std::size_t>(S) * width, pool + 100);  // unused: bad
  for (int s = 0, next = 0; s < S; ++s) {
    for (int j = 0; j < nblocks[s]; ++j) bt[s * width + j] = perm[next++];
  }

  KVCacheSpec spec;
  spec.layout = c.layout;
  spec.num_blocks = pool;
  spec.block_size = bs;
  spec.num_kv_heads = c.num_kv_heads;
  spec.head_size = c.head_size;
  spec.dtype = c.kv_dtype;
  spec.page_pad = c.page_pad;
  const std::int64_t elems = kv_cache_elements(spec).value();
  const std::size_t cache_bytes = static_cast<std::size_t>(elems) * dtype_size(c.kv_dtype);
  std::vector<unsigned char> k1(cache_bytes), v1(cache_bytes);
  fill_nan(k1, c.kv_dtype);
  fill_nan(v1, c.kv_dtype);
  std::vector<unsigned char> k2 = k1, v2 = v1;
  auto cache1 = make_kv_cache(spec, k1.data(), v1.data(), Device::cpu(), c.k_scale, c.v_scale);
  auto cache2 = make_kv_cache(spec, k2.data(), v2.data(), Device::cpu(), c.k_scale, c.v_scale);
  ASSERT_TRUE(cache1.ok()) << cache1.status().to_string();
  ASSERT_TRUE(cache2.ok());

  // Every token of every sequence, in one write_kv call with a padding slot in the middle.
  // fp8 caches get inputs of the query dtype; others need the cache dtype.
  const DType in_dtype = is_fp8(c.kv_dtype) ? c.dtype : c.kv_dtype;
  std::int64_t total = 1;
  for (int l : c.seq_lens) total += l;
  const std::int64_t row = static_cast<std::int64_t>(c.num_kv_heads) * c.head_size;
  // Keys with a row stride of 2 rows (a strided input), values dense.
  auto kin = random_tensor(2 * total * row, in_dtype, rng);
  auto vin = random_tensor(total * row, in_dtype, rng);
  std::vector<std::int64_t> slots;
  for (int s = 0; s < S; ++s) {
    if (s == S / 2) slots.push_back(-1);
    for (int j = 0; j < c.seq_lens[s]; ++j) {
      slots.push_back(static_cast<std::int64_t>(bt[s * width + j / bs]) * bs + j % bs);
    }
  }
  if (S == 0) slots.push_back(-1);
  const std::int64_t n_slots = static_cast<std::int64_t>(slots.size());
  TensorView key = TensorView::strided(kin.data(), in_dtype, {total, c.num_kv_heads, c.head_size},
                                       {2 * row, c.head_size, 1});
  TensorView value =
      TensorView::contiguous(vin.data(), in_dtype, {total, c.num_kv_heads, c.head_size});
  TensorView sm = TensorView::contiguous(slots.data(), DType::kInt64, {n_slots});
  Status st = write_kv(key, value, sm, *cache1);
  ASSERT_TRUE(st.ok()) << st.to_string();
  st = reference_write_kv(key, value, sm, *cache2);
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_TRUE(k1 == k2) << "write_kv key cache differs from reference_write_kv";
  ASSERT_TRUE(v1 == v2) << "write_kv value cache differs from reference_write_kv";

  std::vector<std::int32_t> sl(c.seq_lens.begin(), c.seq_lens.end());
  std::vector<std::int32_t> qsl{0};
  for (int l : c.query_lens) qsl.push_back(qsl.back() + l);
  const std::int64_t T = qsl.back();
  const int H = c.num_heads, D = c.head_size;
  // Query rows padded to a token stride of H*D + 8 elements (a strided query).
  const std::int64_t q_tok = static_cast<std::int64_t>(H) * D + 8;
  auto qmem = random_tensor(std::max<std::int64_t>(T, 1) * q_tok, c.dtype, rng);
  std::vector<float> slopes(H), sinks(H);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int h = 0; h < H; ++h) {
    slopes[h] = std::ldexp(1.0f, -(h + 1));
    sinks[h] = h % 3 == 2 ? -std::numeric_limits<float>::infinity() : 2.0f * u(rng);
  }

  const int guard = 64;
  const std::size_t es = dtype_size(c.dtype);
  std::vector<unsigned char> out_mem((static_cast<std::size_t>(T) * H * D + 2 * guard) * es, 0xCD);
  std::vector<float> lse_mem(static_cast<std::size_t>(T) * H + 2 * guard, 777.0f);
  std::vector<float> ref_out(static_cast<std::size_t>(T) * H * D, NAN);
  std::vector<float> ref_lse(static_cast<std::size_t>(T) * H, NAN);

  AttentionArgs a;
  a.query = TensorView::strided(qmem.data(), c.dtype, {T, H, D}, {q_tok, D, 1});
  a.cache = *cache1;
  a.block_table = TensorView::contiguous(bt.data(), DType::kInt32, {S, width});
  a.seq_lens = TensorView::contiguous(sl.data(), DType::kInt32, {S});
  a.query_start_loc = TensorView::contiguous(qsl.data(), DType::kInt32, {S + 1});
  a.out = TensorView::contiguous(out_mem.data() + guard * es, c.dtype, {T, H, D});
  a.lse = TensorView::contiguous(lse_mem.data() + guard, DType::kFloat32, {T, H});
  a.params.scale = default_scale(D);
  a.params.softcap = c.softcap;
  a.params.sliding_window = c.window;
  if (c.alibi) a.params.alibi_slopes = TensorView::contiguous(slopes.data(), DType::kFloat32, {H});
  if (c.sinks) a.params.sinks = TensorView::contiguous(sinks.data(), DType::kFloat32, {H});

  PlanOptions opt;
  opt.tile_tokens = c.tile;
  opt.num_threads = num_threads;
  st = paged_attention(a, HostMetadata::from_args(a), nullptr, opt);
  ASSERT_TRUE(st.ok()) << st.to_string();

  AttentionArgs r = a;
  r.out = TensorView::contiguous(ref_out.data(), DType::kFloat32, {T, H, D});
  r.lse = TensorView::contiguous(ref_lse.data(), DType::kFloat32, {T, H});
  st = reference_attention(r);
  ASSERT_TRUE(st.ok()) << st.to_string();

  const double tol = budget(c.dtype);
  int failures = 0;
  for (std::int64_t i = 0; i < T * H * D && failures < 5; ++i) {
    const double got = numeric::load_as_float(out_mem.data() + guard * es, c.dtype, i);
    const double want = ref_out[i];
    if (!(std::fabs(got - want) <= tol + tol * std::fabs(want))) {
      ADD_FAILURE() << "out[" << i / (H * D) << "][" << (i / D) % H << "][" << i % D
                    << "] = " << got << ", oracle " << want;
      ++failures;
    }
  }
  for (std::int64_t i = 0; i < T * H && failures < 5; ++i) {
    const double got = lse_mem[guard + i];
    const double want = ref_lse[i];
    if (!(std::fabs(got - want) <= 1e-4 + 1e-5 * std::fabs(want))) {
      ADD_FAILURE() << "lse[" << i / H << "][" << i % H << "] = " << got << ", oracle " << want;
      ++failures;
    }
  }
  for (int i = 0; i < guard * static_cast<int>(es); ++i) {
    ASSERT_EQ(out_mem[i], 0xCD) << "write before out";
    ASSERT_EQ(out_mem[out_mem.size() - 1 - i], 0xCD) << "write after out";
  }
  for (int i = 0; i < guard; ++i) {
    ASSERT_EQ(lse_mem[i], 777.0f);
    ASSERT_EQ(lse_mem[lse_mem.size() - 1 - i], 777.0f);
  }
}

TEST(CpuBackendSmoke, DecodeEveryLayoutAndDtype) {
  for (KVLayout layout : {KVLayout::kSplit, KVLayout::kNHD, KVLayout::kHND}) {
    for (DType dt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
      Config c;
      c.layout = layout;
      c.dtype = c.kv_dtype = dt;
      c.seq_lens = {1, 15, 16, 17, 40};
      c.query_lens = {1, 1, 1, 1, 1};
      check(c);
    }
  }
}

TEST(CpuBackendSmoke, Fp8CachesWithScales) {
  for (KVLayout layout : {KVLayout::kSplit, KVLayout::kNHD, KVLayout::kHND}) {
    for (DType kv : {DType::kFloat8E4M3, DType::kFloat8E5M2}) {
      for (DType dt : {DType::kFloat32, DType::kBFloat16}) {
        Config c;
        c.layout = layout;
        c.dtype = dt;
        c.kv_dtype = kv;
        c.head_size = 64;  // split fp8 needs a multiple of 16
        c.k_scale = 0.05f;
        c.v_scale = 0.02f;
        c.seq_lens = {9, 33};
        c.query_lens = {1, 4};
        c.num_heads = 4;
        c.num_kv_heads = 2;
        check(c);
      }
    }
  }
}

TEST(CpuBackendSmoke, TilesIndependentOfBlocks) {
  // Tiles of 1, 5 (straddling blocks of 3 and 16), equal to the block, and far larger.
  for (int bs : {1, 3, 16, 33}) {
    for (int tile : {1, 5, 16, 64, 1000}) {
      Config c;
      c.block_size = bs;
      c.tile = tile;
      c.layout = bs % 2 ? KVLayout::kSplit : KVLayout::kHND;
      c.seq_lens = {50, 7, 0, 70};
      c.query_lens = {20, 1, 0, 3};
      c.seed = static_cast<std::uint64_t>(bs * 1000 + tile);
      check(c);
    }
  }
}

TEST(CpuBackendSmoke, FeaturesAndGqaRatios) {
  struct G {
    int q, kv;
  };
  std::uint64_t seed = 10;
  for (G g : {G{1, 1}, G{4, 1}, G{8, 2}, G{5, 1}, G{16, 1}}) {
    for (int feature = 0; feature < 5; ++feature) {
      Config c;
      c.num_heads = g.q;
      c.num_kv_heads = g.kv;
      c.head_size = 40;
      c.block_size = 8;
      c.tile = 16;
      c.dtype = c.kv_dtype = feature % 2 ? DType::kBFloat16 : DType::kFloat32;
      c.seq_lens = {100, 1, 37};
      c.query_lens = {70, 1, 5};
      c.window = feature == 1 || feature == 4 ? 13 : 0;
      c.softcap = feature == 2 || feature == 4 ? 5.0f : 0.0f;
      c.alibi = feature == 3 || feature == 4;
      c.sinks = feature >= 3;
      c.seed = seed++;
      check(c);
    }
  }
}

TEST(CpuBackendSmoke, WindowOfOneAndPaddedPages) {
  Config c;
  c.window = 1;
  c.page_pad = 13;
  c.layout = KVLayout::kSplit;
  c.seq_lens = {5, 64};
  c.query_lens = {5, 64};
  check(c);
  c.window = 17;
  c.layout = KVLayout::kNHD;
  c.tile = 4;
  check(c);
}

TEST(CpuBackendSmoke, ResultIsIndependentOfThreadCount) {
  Config c;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.seq_lens = {300, 3, 130};
  c.query_lens = {200, 1, 130};
  c.dtype = c.kv_dtype = DType::kBFloat16;
  check(c, 1);
  check(c, 3);
  check(c, 16);
}

// ------------------------------------------------------------------ merge_attention_states

// An LSE of NaN or +inf against an empty (-inf) state: e^(l - lse) is NaN in the identity, and
// the API promises NaN results (the CUDA merge gives them); passing the state through would
// hide the non-finite input. Both sides, both kinds.
TEST(CpuMerge, NonFiniteLseAgainstAnEmptyStateGivesNaN) {
  const int T = 1, H = 4, D = 8;
  const float ninf = -std::numeric_limits<float>::infinity();
  const float pinf = std::numeric_limits<float>::infinity();
  std::vector<float> oa(T * H * D, 0.25f), ob(T * H * D, -0.5f), out(T * H * D, 99.0f);
  std::vector<float> la = {NAN, pinf, ninf, ninf};
  std::vector<float> lb = {ninf, ninf, NAN, pinf};
  std::vector<float> lo(T * H, 0.0f);
  auto view3 = [&](std::vector<float>& v) {
    return TensorView::contiguous(v.data(), DType::kFloat32, {T, H, D});
  };
  auto view2 = [&](std::vector<float>& v) {
    return TensorView::contiguous(v.data(), DType::kFloat32, {T, H});
  };
  ASSERT_TRUE(merge_attention_states(view3(oa), view2(la), view3(ob), view2(lb), view3(out),
                                     view2(lo))
                  .ok());
  for (int h = 0; h < H; ++h) {
    EXPECT_TRUE(std::isnan(lo[h])) << "head " << h << ": lse " << lo[h];
    for (int d = 0; d < D; ++d) EXPECT_TRUE(std::isnan(out[h * D + d])) << "head " << h;
  }
}

TEST(CpuMerge, MatchesTheLogSumExpIdentity) {
  const int T = 3, H = 2, D = 8;
  const float ninf = -std::numeric_limits<float>::infinity();
  std::vector<float> oa(T * H * D), ob(T * H * D), out(T * H * D, 99.0f);
  for (int i = 0; i < T * H * D; ++i) {
    oa[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
    ob[i] = 0.05f * static_cast<float>(i % 5) + 0.2f;
  }
  // (finite, finite), (-inf, finite), (finite, -inf), (-inf, -inf), (big gap), (equal).
  std::vector<float> la = {0.5f, ninf, 2.0f, ninf, 80.0f, 1.0f};
  std::vector<float> lb = {1.5f, -3.0f, ninf, ninf, -5.0f, 1.0f};
  std::vector<float> lo(T * H, 0.0f);
  // A -inf state's output may be garbage; make it NaN to prove it is not read.
  for (int r = 0; r < T * H; ++r) {
    for (int d = 0; d < D; ++d) {
      if (la[r] == ninf) oa[r * D + d] = NAN;
      if (lb[r] == ninf) ob[r * D + d] = NAN;
    }
  }
  auto view3 = [&](std::vector<float>& v) {
    return TensorView::contiguous(v.data(), DType::kFloat32, {T, H, D});
  };
  auto view2 = [&](std::vector<float>& v) {
    return TensorView::contiguous(v.data(), DType::kFloat32, {T, H});
  };
  Status st =
      merge_attention_states(view3(oa), view2(la), view3(ob), view2(lb), view3(out), view2(lo));
  ASSERT_TRUE(st.ok()) << st.to_string();
  for (int r = 0; r < T * H; ++r) {
    const double a = la[r], b = lb[r];
    double want_lse;
    if (a == ninf && b == ninf) {
      want_lse = ninf;
    } else {
      const double m = std::max(a, b);
      want_lse = m + std::log(std::exp(a - m) + std::exp(b - m));
    }
    EXPECT_EQ(std::isinf(lo[r]), std::isinf(want_lse)) << r;
    if (!std::isinf(want_lse)) {
      EXPECT_NEAR(lo[r], want_lse, 1e-5) << r;
    }
    for (int d = 0; d < D; ++d) {
      double want = 0.0;
      if (a != ninf) want += std::exp(a - want_lse) * oa[r * D + d];
      if (b != ninf) want += std::exp(b - want_lse) * ob[r * D + d];
      EXPECT_NEAR(out[r * D + d], want, 1e-6) << r << " " << d;
    }
  }
}

TEST(CpuMerge, OutMayAliasAnInputAndTokensMayBeStrided) {
  const int T = 4, H = 3, D = 16, tok = H * D + 16;  // token stride padded by 16 elements
  std::vector<std::uint16_t> a(T * tok), b(T * tok);
  std::vector<float> la(T * H), lb(T * H), lo(T * H);
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (auto& x : a) x = numeric::float_to_bf16_bits(u(rng));
  for (auto& x : b) x = numeric::float_to_bf16_bits(u(rng));
  for (int i = 0; i < T * H; ++i) {
    la[i] = u(rng);
    lb[i] = u(rng);
  }
  const std::vector<std::uint16_t> a0 = a;
  TensorView va = TensorView::strided(a.data(), DType::kBFloat16, {T, H, D}, {tok, D, 1});
  TensorView vb = TensorView::strided(b.data(), DType::kBFloat16, {T, H, D}, {tok, D, 1});
  TensorView vla = TensorView::contiguous(la.data(), DType::kFloat32, {T, H});
  TensorView vlb = TensorView::contiguous(lb.data(), DType::kFloat32, {T, H});
  TensorView vlo = TensorView::contiguous(lo.data(), DType::kFloat32, {T, H});
  Status st = merge_attention_states(va, vla, vb, vlb, va, vlo);  // out aliases out_a
  ASSERT_TRUE(st.ok()) << st.to_string();
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < H; ++h) {
      const int r = t * H + h;
      const double m = std::max(la[r], lb[r]);
      const double lse = m + std::log(std::exp(la[r] - m) + std::exp(lb[r] - m));
      EXPECT_NEAR(lo[r], lse, 1e-5);
      for (int d = 0; d < D; ++d) {
        const int i = t * tok + h * D + d;
        const double want = std::exp(la[r] - lse) * numeric::bf16_bits_to_float(a0[i]) +
                            std::exp(lb[r] - lse) * numeric::bf16_bits_to_float(b[i]);
        EXPECT_NEAR(numeric::bf16_bits_to_float(a[i]), want, 8e-3 + 8e-3 * std::fabs(want));
      }
    }
    // The padding between tokens is not touched.
    for (int i = H * D; i < tok; ++i) EXPECT_EQ(a[t * tok + i], a0[t * tok + i]);
  }
}

}  // namespace
}  // namespace pagedattn
