// The output check of `pagedattn bench` (bench/check.h) on the host: the CPU backend computes a
// paged batch, and check_output (with memcpy for the device copies) must pass it, in every
// layout and with every feature, and must catch a wrong element (in a sampled sequence for
// --check sampled, anywhere for --check full) and a NaN output.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "bench/check.h"
#include "pagedattn/pagedattn.h"
#include "src/core/numeric.h"
#include "src/testing/fill.h"

namespace pagedattn::bench {
namespace {

Status host_copy(void* dst, const void* src, std::size_t bytes) {
  std::memcpy(dst, src, bytes);
  return Status::Ok();
}

/// A small batch computed by the CPU backend, laid out as the bench lays out its calls (a
/// permuted block pool, dense query and output), with the inputs check_output needs.
struct Batch {
  Workload w;
  std::vector<std::int32_t> table, qsl;
  std::int64_t max_blocks = 0;
  std::vector<unsigned char> k, v, q, out;
  std::vector<float> lse;  // when w.lse
  std::vector<float> slopes, sinks;
  KVCache cache;
  float scale = 0;

  explicit Batch(const Workload& workload) : w(workload) {
    const int S = static_cast<int>(w.seq_lens.size());
    qsl.assign(S + 1, 0);
    std::int64_t needed = 0;
    for (int s = 0; s < S; ++s) {
      qsl[s + 1] = qsl[s] + (w.query_lens.empty() ? 1 : w.query_lens[s]);
      const std::int64_t nb = (w.seq_lens[s] + w.block_size - 1) / w.block_size;
      max_blocks = std::max(max_blocks, nb);
      needed += nb;
    }
    const std::int64_t pool = needed + 5;
    std::vector<std::int32_t> perm(pool);
    std::iota(perm.begin(), perm.end(), 0);
    testing::SplitMix64 rng(42);
    for (std::int64_t i = pool - 1; i > 0; --i)
      std::swap(perm[i], perm[rng.below(static_cast<std::uint64_t>(i) + 1)]);
    table.assign(static_cast<std::size_t>(S * max_blocks), 0);
    std::int64_t next = 0;
    for (int s = 0; s < S; ++s)
      for (std::int64_t j = 0; j < (w.seq_lens[s] + w.block_size - 1) / w.block_size; ++j)
        table[s * max_blocks + j] = perm[next++];

    KVCacheSpec spec{w.layout, pool, w.block_size, w.num_kv_heads, w.head_size, w.kv_dtype,
                     w.page_pad};
    const std::int64_t elems = *kv_cache_elements(spec);
    const std::size_t kves = dtype_size(w.kv_dtype), qes = dtype_size(w.dtype);
    k.resize(elems * kves);
    v.resize(elems * kves);
    for (std::int64_t i = 0; i < elems; ++i) {
      numeric::store_from_float(k.data(), w.kv_dtype, i, rng.uniform(-1, 1));
      numeric::store_from_float(v.data(), w.kv_dtype, i, rng.uniform(-1, 1));
    }
    const std::int64_t T = qsl[S];
    const std::int64_t qe = T * w.num_heads * w.head_size;
    q.resize(qe * qes);
    out.resize(qe * qes);
    for (std::int64_t i = 0; i < qe; ++i)
      numeric::store_from_float(q.data(), w.dtype, i, rng.uniform(-1, 1));
    cache = *make_kv_cache(spec, k.data(), v.data(), Device::cpu(), w.k_scale, w.v_scale);
    scale = w.scale > 0 ? w.scale : default_scale(w.head_size);

    AttentionArgs a;
    a.query = TensorView::contiguous(q.data(), w.dtype, {T, w.num_heads, w.head_size});
    a.out = TensorView::contiguous(out.data(), w.dtype, {T, w.num_heads, w.head_size});
    if (w.lse) {
      lse.assign(static_cast<std::size_t>(T * w.num_heads), 0.0f);
      a.lse = TensorView::contiguous(lse.data(), DType::kFloat32, {T, w.num_heads});
    }
    a.cache = cache;
    a.block_table = TensorView::contiguous(table.data(), DType::kInt32, {S, max_blocks});
    std::vector<std::int32_t> lens(w.seq_lens.begin(), w.seq_lens.end());
    a.seq_lens = TensorView::contiguous(lens.data(), DType::kInt32, {S});
    a.query_start_loc = TensorView::contiguous(qsl.data(), DType::kInt32, {S + 1});
    a.params.scale = scale;
    a.params.softcap = w.softcap;
    a.params.sliding_window = w.sliding_window;
    if (w.alibi) {
      for (int h = 0; h < w.num_heads; ++h) slopes.push_back(0.05f * (h + 1));
      a.params.alibi_slopes = TensorView::contiguous(slopes.data(), DType::kFloat32, {w.num_heads});
    }
    if (w.sinks) {
      for (int h = 0; h < w.num_heads; ++h) sinks.push_back(rng.uniform(-1, 1));
      a.params.sinks = TensorView::contiguous(sinks.data(), DType::kFloat32, {w.num_heads});
    }
    HostMetadata host;
    host.block_table = a.block_table;
    host.seq_lens = a.seq_lens;
    host.query_start_loc = a.query_start_loc;
    const Status st = paged_attention(a, host);
    EXPECT_TRUE(st.ok()) << st.to_string();
  }

  CheckInputs inputs() const {
    CheckInputs in;
    in.workload = &w;
    in.cache = cache;
    in.block_table = table.data();
    in.max_blocks = max_blocks;
    in.query_start_loc = qsl.data();
    in.query = q.data();
    in.out = out.data();
    in.lse = w.lse ? lse.data() : nullptr;
    in.alibi_slopes = slopes;
    in.sinks = sinks;
    in.scale = scale;
    in.copy_to_host = &host_copy;
    return in;
  }

  /// Add `delta` to output element (token, head, dim).
  void perturb(std::int64_t token, int head, int dim, float delta) {
    const std::int64_t i = (token * w.num_heads + head) * w.head_size + dim;
    numeric::store_from_float(out.data(), w.dtype, i,
                              numeric::load_as_float(out.data(), w.dtype, i) + delta);
  }
};

Workload small(KVLayout layout, DType dtype, DType kv_dtype) {
  Workload w;
  w.name = "t";
  w.num_heads = 8;
  w.num_kv_heads = 2;
  w.head_size = 64;
  w.block_size = 16;
  w.layout = layout;
  w.dtype = dtype;
  w.kv_dtype = kv_dtype;
  // Sequence 1 is the longest; 0 and 3 the first and last; 2 is in no sample.
  w.seq_lens = {17, 300, 40, 33};
  w.scale = 6.0f * default_scale(w.head_size);
  return w;
}

TEST(BenchCheck, PassesTheCpuBackendInEveryLayoutAndDtype) {
  for (KVLayout layout : {KVLayout::kNHD, KVLayout::kHND, KVLayout::kSplit})
    for (DType kv : {DType::kBFloat16, DType::kFloat8E4M3, DType::kFloat8E5M2}) {
      Workload w = small(layout, DType::kBFloat16, kv);
      if (kv != DType::kBFloat16) w.k_scale = 0.5f, w.v_scale = 2.0f;
      Batch b(w);
      for (CheckMode mode : {CheckMode::kSampled, CheckMode::kFull, CheckMode::kAuto}) {
        auto r = check_output(b.inputs(), mode);
        ASSERT_TRUE(r.ok()) << r.status().to_string();
        EXPECT_TRUE(r->pass) << to_string(layout) << " " << to_string(kv) << ": " << r->detail;
        EXPECT_LE(r->worst_ratio, 1.0);
        EXPECT_GT(r->worst_ratio, 0.0);  // a real comparison happened
        if (mode == CheckMode::kSampled) {
          EXPECT_EQ(r->seqs_checked, 3);
          EXPECT_EQ(r->heads_checked, 2);  // query heads 0 and 7
          EXPECT_EQ(r->elements, 3 * 2 * 64);
        } else {
          // kAuto resolves to full on a batch this small.
          EXPECT_EQ(r->mode, CheckMode::kFull);
          EXPECT_EQ(r->seqs_checked, 4);
          EXPECT_EQ(r->heads_checked, 8);
          EXPECT_EQ(r->elements, 4 * 8 * 64);
        }
      }
    }
}

TEST(BenchCheck, PassesWithFeaturesAndPrefillRows) {
  Workload w = small(KVLayout::kNHD, DType::kFloat16, DType::kFloat16);
  w.softcap = 20.0f;
  w.sliding_window = 50;
  w.alibi = true;
  w.sinks = true;
  w.page_pad = 24;
  w.query_lens = {1, 7, 0, 33};  // a prefill chunk, a skipped sequence, a whole prompt
  Batch b(w);
  auto r = check_output(b.inputs(), CheckMode::kFull);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->pass) << r->detail;
  EXPECT_EQ(r->seqs_checked, 3);  // the skipped one has no rows
  EXPECT_EQ(r->elements, (1 + 7 + 33) * 8 * 64);
  // A wrong sink would change every row of its head: the check must see it.
  std::vector<float> wrong = b.sinks;
  wrong[5] += 2.0f;
  CheckInputs in = b.inputs();
  in.sinks = wrong;
  r = check_output(in, CheckMode::kFull);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->pass);
  EXPECT_NE(r->detail.find("head 5"), std::string::npos) << r->detail;
}

TEST(BenchCheck, CatchesAWrongElement) {
  Batch b(small(KVLayout::kSplit, DType::kBFloat16, DType::kBFloat16));
  // The longest sequence (1), its last KV head's last query head: in the sample.
  b.perturb(1, 7, 63, 0.25f);
  for (CheckMode mode : {CheckMode::kSampled, CheckMode::kFull}) {
    auto r = check_output(b.inputs(), mode);
    ASSERT_TRUE(r.ok());
    EXPECT_FALSE(r->pass) << to_string(mode);
    EXPECT_GT(r->worst_ratio, 1.0);
    EXPECT_NE(r->detail.find("sequence 1 (seq_len 300), query row 0, head 7, dim 63"),
              std::string::npos)
        << r->detail;
  }
  // Sequence 2 is in no sample: only the full check sees an error there.
  Batch c(small(KVLayout::kSplit, DType::kBFloat16, DType::kBFloat16));
  c.perturb(2, 0, 0, 0.25f);
  auto sampled = check_output(c.inputs(), CheckMode::kSampled);
  auto full = check_output(c.inputs(), CheckMode::kFull);
  ASSERT_TRUE(sampled.ok() && full.ok());
  EXPECT_TRUE(sampled->pass) << sampled->detail;
  EXPECT_FALSE(full->pass);
  EXPECT_NE(full->detail.find("sequence 2"), std::string::npos) << full->detail;
}

TEST(BenchCheck, CatchesANanAnywhere) {
  Batch b(small(KVLayout::kNHD, DType::kBFloat16, DType::kFloat8E4M3));
  // Sequence 2 (in no sample): a NaN fails even the sampled check, naming where it is.
  const std::int64_t i = (2 * 8 + 3) * 64 + 9;
  numeric::store_from_float(b.out.data(), DType::kBFloat16, i, NAN);
  auto r = check_output(b.inputs(), CheckMode::kSampled);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->pass);
  EXPECT_NE(r->detail.find("output token 2 (sequence 2, seq_len 40), head 3, dim 9 is nan"),
            std::string::npos)
      << r->detail;
  EXPECT_NE(r->summary().find("FAIL"), std::string::npos);
}

TEST(BenchCheck, ChecksTheLseWhenTheCallWritesIt) {
  Workload w = small(KVLayout::kHND, DType::kBFloat16, DType::kFloat8E5M2);
  w.lse = true;
  w.sinks = true;
  Batch b(w);
  auto r = check_output(b.inputs(), CheckMode::kFull);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->pass) << r->detail;
  EXPECT_EQ(r->elements, 4 * 8 * 64 + 4 * 8);  // outputs and LSEs
  // A wrong LSE in a sampled row (sequence 3 = token 3, head 7).
  b.lse[3 * 8 + 7] += 0.5f;
  r = check_output(b.inputs(), CheckMode::kSampled);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->pass);
  EXPECT_NE(r->detail.find("lse of sequence 3 (seq_len 33), query row 0, head 7"),
            std::string::npos)
      << r->detail;
  // A NaN LSE anywhere (an unwritten row).
  b.lse[3 * 8 + 7] -= 0.5f;
  b.lse[2 * 8 + 1] = NAN;
  r = check_output(b.inputs(), CheckMode::kSampled);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->pass);
  EXPECT_NE(r->detail.find("lse of output token 2, head 1 is nan"), std::string::npos) << r->detail;
}

TEST(BenchCheck, AutoModeSamplesLargeBatches) {
  Workload w = small(KVLayout::kNHD, DType::kBFloat16, DType::kBFloat16);
  EXPECT_EQ(check_mode_for(w, CheckMode::kAuto), CheckMode::kFull);
  // W1: 64 x 4096 at 32 heads of 128 is 2^31 multiply-adds: still full; twice that is not.
  w.num_heads = 32;
  w.num_kv_heads = 8;
  w.head_size = 128;
  w.seq_lens.assign(64, 4096);
  EXPECT_EQ(check_mode_for(w, CheckMode::kAuto), CheckMode::kFull);
  w.seq_lens.assign(128, 4096);
  EXPECT_EQ(check_mode_for(w, CheckMode::kAuto), CheckMode::kSampled);
  EXPECT_EQ(check_mode_for(w, CheckMode::kFull), CheckMode::kFull);
  EXPECT_EQ(check_mode_for(w, CheckMode::kNone), CheckMode::kNone);
  auto parsed = parse_check_mode("sampled", "--check");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed, CheckMode::kSampled);
  EXPECT_FALSE(parse_check_mode("Full", "--check").ok());
}

TEST(BenchCheck, UsefulBytesCountTheRowsOwnBytes) {
  Workload w = small(KVLayout::kNHD, DType::kBFloat16, DType::kBFloat16);
  const std::int64_t kv_tokens = 17 + 300 + 40 + 33, q_tokens = 4;
  const std::int64_t qo = 2 * q_tokens * 8 * 64 * 2;
  EXPECT_EQ(useful_bytes(w), 2 * kv_tokens * 2 * 64 * 2 + qo);
  // fp8: one byte per cached element.
  w.kv_dtype = DType::kFloat8E4M3;
  EXPECT_EQ(useful_bytes(w), 2 * kv_tokens * 2 * 64 * 1 + qo);
  // A window reads the last W + query_len - 1 keys; a skipped sequence reads nothing.
  w.sliding_window = 20;
  w.query_lens = {1, 5, 0, 1};
  const std::int64_t windowed = 17 + 24 + 0 + 20, q2 = 1 + 5 + 1;
  EXPECT_EQ(useful_bytes(w), 2 * windowed * 2 * 64 + 2 * q2 * 8 * 64 * 2);
  // The LSE output: 4 bytes per query row and head.
  w.lse = true;
  EXPECT_EQ(useful_bytes(w), 2 * windowed * 2 * 64 + 2 * q2 * 8 * 64 * 2 + q2 * 8 * 4);
}

}  // namespace
}  // namespace pagedattn::bench
