// The oracle against numbers worked out by hand. Every attention case uses head_size 8,
// scale 0.5, a query (2, 0, ..., 0) and key j = (j, 0, ..., 0), so the logit of key j is exactly
// j; value j is the unit vector e_j, so out[d] is the softmax weight of key d. The weights are
// then the textbook ones: softmax(0, 1, 2) = (0.0900306, 0.2447285, 0.6652410).
// Unused cache memory is NaN throughout: a single stray read would show up as NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "pagedattn/pagedattn.h"
#include "src/core/numeric.h"

namespace pagedattn {
namespace {

constexpr int kD = 8;
constexpr double kTol = 1e-6;
const float kInf = std::numeric_limits<float>::infinity();

// softmax(0, 1, 2), softmax(0, 1), softmax(0, 1, 2, 3) and log-sum-exps, from the definitions.
constexpr double kW3[3] = {0.09003057317038046, 0.24472847105479764, 0.6652409557748219};
constexpr double kLse3 = 2.40760596444438;  // log(1 + e + e^2)
constexpr double kW2[2] = {0.2689414213699951, 0.7310585786300049};
constexpr double kLse2 = 1.3132616875182228;  // log(1 + e)
constexpr double kW4[4] = {0.03205860328008499, 0.08714431874203257, 0.23688281808991013,
                           0.6439142598879722};

/// Fill `bytes` with the NaN pattern of `dtype`.
void poison(std::vector<unsigned char>& bytes, DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      for (std::size_t i = 0; i + 4 <= bytes.size(); i += 4) {
        const std::uint32_t nan = 0x7FC00000u;
        std::memcpy(&bytes[i], &nan, 4);
      }
      break;
    case DType::kFloat16:
    case DType::kBFloat16:
      for (std::size_t i = 0; i + 2 <= bytes.size(); i += 2) {
        const std::uint16_t nan = dtype == DType::kFloat16 ? 0x7E00u : 0x7FC0u;
        std::memcpy(&bytes[i], &nan, 2);
      }
      break;
    default: std::fill(bytes.begin(), bytes.end(), 0x7F); break;  // NaN in e4m3 and e5m2
  }
}

/// A NaN-poisoned paged cache with `kv_heads` heads of size kD.
struct Cache {
  KVCacheSpec spec;
  std::vector<unsigned char> kmem, vmem;
  KVCache cache;

  Cache(KVLayout layout, int num_blocks, int block_size, int kv_heads,
        DType dtype = DType::kFloat32, std::int64_t page_pad = 0, float k_scale = 1.0f,
        float v_scale = 1.0f, int head_size = kD) {
    spec.layout = layout;
    spec.num_blocks = num_blocks;
    spec.block_size = block_size;
    spec.num_kv_heads = kv_heads;
    spec.head_size = head_size;
    spec.dtype = dtype;
    spec.page_pad = page_pad;
    const std::int64_t elems = kv_cache_elements(spec).value();
    kmem.resize(static_cast<std::size_t>(elems) * dtype_size(dtype));
    vmem.resize(kmem.size());
    poison(kmem, dtype);
    poison(vmem, dtype);
    auto c = make_kv_cache(spec, kmem.data(), vmem.data(), Device::cpu(), k_scale, v_scale);
    EXPECT_TRUE(c.ok()) << c.status().to_string();
    cache = *c;
  }

  /// Store one token (fp32 rows [kv_heads][head_size]) through the writer oracle.
  void put(std::int64_t slot, std::vector<float> k, std::vector<float> v) {
    const std::int64_t h = spec.num_kv_heads, d = spec.head_size;
    std::int64_t slots[1] = {slot};
    Status st = reference_write_kv(TensorView::contiguous(k.data(), DType::kFloat32, {1, h, d}),
                                   TensorView::contiguous(v.data(), DType::kFloat32, {1, h, d}),
                                   TensorView::contiguous(slots, DType::kInt64, {1}), cache);
    ASSERT_TRUE(st.ok()) << st.to_string();
  }

  /// The standard token j on every KV head: key (key_mul * j, 0, ...), value value_mul * e_j.
  void put_standard(std::int64_t slot, int j, float key_mul = 1.0f, float value_mul = 1.0f) {
    std::vector<float> k(static_cast<std::size_t>(spec.num_kv_heads) * spec.head_size, 0.0f);
    std::vector<float> v(k.size(), 0.0f);
    for (int g = 0; g < spec.num_kv_heads; ++g) {
      k[static_cast<std::size_t>(g) * spec.head_size] = key_mul * static_cast<float>(j);
      v[static_cast<std::size_t>(g) * spec.head_size + j] = value_mul;
    }
    put(slot, k, v);
  }
};

/// A batch over one cache: block tables, lengths, queries, and guarded outputs.
struct Batch {
  int num_heads = 1;
  std::vector<int> seq_lens, query_lens;
  std::vector<std::vector<std::int32_t>> tables;
  int width = 0;
  std::vector<std::int32_t> bt, sl, qsl;
  std::vector<float> q, out_mem, lse_mem;
  static constexpr int kGuard = 16;
  static constexpr float kSentinel = 12345.0f;
  AttentionParams params;
  std::vector<float> slopes, sinks;
  DType out_dtype = DType::kFloat32;
  std::vector<std::uint16_t> out16;

  std::int64_t tokens() const {
    std::int64_t t = 0;
    for (int l : query_lens) t += l;
    return t;
  }

  AttentionArgs build(const Cache& c) {
    const std::int64_t n = tokens();
    const std::int64_t s = static_cast<std::int64_t>(seq_lens.size());
    width = 1;
    for (const auto& t : tables) width = std::max<int>(width, static_cast<int>(t.size()));
    bt.assign(static_cast<std::size_t>(s * width), 0);
    for (std::int64_t i = 0; i < s; ++i) {
      for (std::size_t j = 0; j < tables[i].size(); ++j) bt[i * width + j] = tables[i][j];
    }
    sl.assign(seq_lens.begin(), seq_lens.end());
    qsl.assign(1, 0);
    for (int l : query_lens) qsl.push_back(qsl.back() + l);
    // Every query row is (2, 0, ..., 0).
    q.assign(static_cast<std::size_t>(n * num_heads * kD), 0.0f);
    for (std::int64_t r = 0; r < n * num_heads; ++r) q[r * kD] = 2.0f;
    out_mem.assign(static_cast<std::size_t>(n * num_heads * kD + 2 * kGuard), kSentinel);
    lse_mem.assign(static_cast<std::size_t>(n * num_heads + 2 * kGuard), kSentinel);
    out16.assign(out_mem.size(), 0xBEEF);

    AttentionArgs a;
    a.query = TensorView::contiguous(q.data(), DType::kFloat32, {n, num_heads, kD});
    a.cache = c.cache;
    a.block_table = TensorView::contiguous(bt.data(), DType::kInt32, {s, width});
    a.seq_lens = TensorView::contiguous(sl.data(), DType::kInt32, {s});
    a.query_start_loc = TensorView::contiguous(qsl.data(), DType::kInt32, {s + 1});
    void* out_data = out_dtype == DType::kFloat32 ? static_cast<void*>(out_mem.data() + kGuard)
                                                  : static_cast<void*>(out16.data() + kGuard);
    a.out = TensorView::contiguous(out_data, out_dtype, {n, num_heads, kD});
    a.lse = TensorView::contiguous(lse_mem.data() + kGuard, DType::kFloat32, {n, num_heads});
    a.params = params;
    a.params.scale = 0.5f;
    if (!slopes.empty()) {
      a.params.alibi_slopes = TensorView::contiguous(slopes.data(), DType::kFloat32, {num_heads});
    }
    if (!sinks.empty()) {
      a.params.sinks = TensorView::contiguous(sinks.data(), DType::kFloat32, {num_heads});
    }
    return a;
  }

  float out(std::int64_t token, int head, int d) const {
    return out_mem[kGuard + (token * num_heads + head) * kD + d];
  }
  float lse(std::int64_t token, int head) const {
    return lse_mem[kGuard + token * num_heads + head];
  }

  void expect_guards_intact() const {
    const std::size_t n = out_mem.size();
    for (int i = 0; i < kGuard; ++i) {
      EXPECT_EQ(out_mem[i], kSentinel);
      EXPECT_EQ(out_mem[n - 1 - i], kSentinel);
      EXPECT_EQ(lse_mem[i], kSentinel);
      EXPECT_EQ(lse_mem[lse_mem.size() - 1 - i], kSentinel);
    }
  }
};

/// out[token][head] must be sum_k w[k] e_{key[k]} (zero elsewhere) and lse as given.
void expect_row(const Batch& b, std::int64_t token, int head, const std::vector<int>& keys,
                const std::vector<double>& w, double lse) {
  std::vector<double> want(kD, 0.0);
  for (std::size_t k = 0; k < keys.size(); ++k) want[keys[k]] = w[k];
  for (int d = 0; d < kD; ++d) {
    EXPECT_NEAR(b.out(token, head, d), want[d], kTol)
        << "token " << token << " head " << head << " d " << d;
  }
  EXPECT_NEAR(b.lse(token, head), lse, kTol) << "token " << token << " head " << head;
}

// ------------------------------------------------------------------ plain attention

struct LayoutCase {
  KVLayout layout;
  std::int64_t page_pad;
};

class OracleLayouts : public ::testing::TestWithParam<LayoutCase> {};

TEST_P(OracleLayouts, DecodeAcrossBlocksMatchesSoftmaxByHand) {
  // Three keys in blocks of two, physical blocks 3 then 1: key 2 is slot 0 of block 1, and
  // slot 1 of block 1 (past seq_len) stays NaN, as do blocks 0 and 2 and the page padding.
  Cache c(GetParam().layout, 4, 2, 1, DType::kFloat32, GetParam().page_pad);
  c.put_standard(3 * 2 + 0, 0);
  c.put_standard(3 * 2 + 1, 1);
  c.put_standard(1 * 2 + 0, 2);
  Batch b;
  b.seq_lens = {3};
  b.query_lens = {1};
  b.tables = {{3, 1}};
  Status st = reference_attention(b.build(c));
  ASSERT_TRUE(st.ok()) << st.to_string();
  expect_row(b, 0, 0, {0, 1, 2}, {kW3[0], kW3[1], kW3[2]}, kLse3);
  b.expect_guards_intact();
}

INSTANTIATE_TEST_SUITE_P(
    All, OracleLayouts,
    ::testing::Values(LayoutCase{KVLayout::kSplit, 0}, LayoutCase{KVLayout::kNHD, 0},
                      LayoutCase{KVLayout::kHND, 0}, LayoutCase{KVLayout::kSplit, 5},
                      LayoutCase{KVLayout::kNHD, 5}, LayoutCase{KVLayout::kHND, 5}),
    [](const ::testing::TestParamInfo<LayoutCase>& info) {
      return std::string(to_string(info.param.layout)) + "_pad" +
             std::to_string(info.param.page_pad);
    });

TEST(Oracle, PrefillIsCausalBottomRightAligned) {
  // query_len == seq_len == 3: row i sees keys 0..i.
  Cache c(KVLayout::kNHD, 2, 2, 1);
  for (int j = 0; j < 3; ++j) c.put_standard(j, j);
  Batch b;
  b.seq_lens = {3};
  b.query_lens = {3};
  b.tables = {{0, 1}};
  ASSERT_TRUE(reference_attention(b.build(c)).ok());
  expect_row(b, 0, 0, {0}, {1.0}, 0.0);
  expect_row(b, 1, 0, {0, 1}, {kW2[0], kW2[1]}, kLse2);
  expect_row(b, 2, 0, {0, 1, 2}, {kW3[0], kW3[1], kW3[2]}, kLse3);
}

TEST(Oracle, ChunkedPrefillSeesItsContext) {
  // seq_len 4 with 2 new tokens: context_len 2, the rows sit at positions 2 and 3.
  Cache c(KVLayout::kHND, 2, 3, 1);
  for (int j = 0; j < 4; ++j) c.put_standard((j < 3 ? 1 * 3 + j : 0 * 3 + (j - 3)), j);
  Batch b;
  b.seq_lens = {4};
  b.query_lens = {2};
  b.tables = {{1, 0}};
  ASSERT_TRUE(reference_attention(b.build(c)).ok());
  expect_row(b, 0, 0, {0, 1, 2}, {kW3[0], kW3[1], kW3[2]}, kLse3);
  expect_row(b, 1, 0, {0, 1, 2, 3}, {kW4[0], kW4[1], kW4[2], kW4[3]},
             std::log(1 + std::exp(1.0) + std::exp(2.0) + std::exp(3.0)));
}

// ------------------------------------------------------------------ softcap, window, ALiBi

TEST(Oracle, SoftcapSquashesLogits) {
  Cache c(KVLayout::kNHD, 1, 4, 1);
  for (int j = 0; j < 3; ++j) c.put_standard(j, j);
  Batch b;
  b.seq_lens = {3};
  b.query_lens = {1};
  b.tables = {{0}};
  b.params.softcap = 1.5f;
  ASSERT_TRUE(reference_attention(b.build(c)).ok());
  // z_j = 1.5 * tanh(j / 1.5): 0, 0.8741744, 1.3050925
  const double z[3] = {0.0, 1.5 * std::tanh(1 / 1.5), 1.5 * std::tanh(2 / 1.5)};
  const double sum = std::exp(z[0]) + std::exp(z[1]) + std::exp(z[2]);
  expect_row(b, 0, 0, {0, 1, 2}, {std::exp(z[0]) / sum, std::exp(z[1]) / sum, std::exp(z[2]) / sum},
             std::log(sum));
  EXPECT_NEAR(z[1], 0.8741744, 1e-6);  // the hand value the formula above must reproduce
}

TEST(Oracle, SlidingWindowCountsTheCurrentToken) {
  // Blocks of one token; key 0 is never written, so reading it would give NaN.
  Cache c(KVLayout::kSplit, 4, 1, 1);
  c.put_standard(2, 1);
  c.put_standard(3, 2);
  Batch b;
  b.seq_lens = {3};
  b.query_lens = {1};
  b.tables = {{0, 2, 3}};
  b.params.sliding_window = 2;  // q_pos 2 keeps keys with 2 - j < 2: keys 1 and 2
  ASSERT_TRUE(reference_attention(b.build(c)).ok());
  expect_row(b, 0, 0, {1, 2}, {kW2[0], kW2[1]}, 1.0 + kLse2);  // logits 1, 2

  Batch b1 = b;
  b1.params.sliding_window = 1;  // only the token itself
  ASSERT_TRUE(reference_attention(b1.build(c)).ok());
  expect_row(b1, 0, 0, {2}, {1.0}, 2.0);
}

TEST(Oracle, SlidingWindowPerPrefillRow) {
  Cache c(KVLayout::kNHD, 1, 4, 1);
  for (int j = 0; j < 4; ++j) c.put_standard(j, j);
  Batch b;
  b.seq_lens = {4};
  b.query_lens = {4};
  b.tables = {{0}};
  b.params.sliding_window = 2;
  ASSERT_TRUE(reference_attention(b.build(c)).ok());
  expect_row(b, 0, 0, {0}, {1.0}, 0.0);
  expect_row(b, 1, 0, {0, 1}, {kW2[0], kW2[1]}, kLse2);
  expect_row(b, 2, 0, {1, 2}, {kW2[0], kW2[1]}, 1.0 + kLse2);
  expect_row(b, 3, 0, {2, 3}, {kW2[0], kW2[1]}, 2.0 + kLse2);
}

TEST(Oracle, AlibiAddsSlopeTimesDistance) {
  // Two query heads on one KV head; head 0 has slope 0.5, head 1 slope 0.
  Cache c(KVLayout::kHND, 1, 4, 1);
  for (int j = 0; j < 3; ++j) c.put_standard(j, j);
  Batch b;
  b.num_heads = 2;
  b.seq_lens = {3};
  b.query_lens = {1};
  b.tables = {{0}};
  b.slopes = {0.5f, 0.0f};
  ASSERT_TRUE(reference_attention(b.build(c)).ok());
  // head 0: z = j + 0.5 * (j - 2) = -1, 0.5, 2
  const double z[3] = {-1.0, 0.5, 2.0};
  const double sum = std::exp(z[0]) + std::exp(z[1]) + std::exp(z[2]);
  expect_row(b, 0, 0, {0, 1, 2}, {std::exp(z[0]) / sum, std::exp(z[1]) / sum, std::exp(z[2]) / sum},
             std::log(sum));
  expect_row(b, 0, 1, {0, 1, 2}, {kW3[0], kW3[1], kW3[2]}, kLse3);
}

TEST(Oracle, SinkJoinsTheDenominatorOnly) {
  Cache c(KVLayout::kNHD, 1, 4, 1);
  for (int j = 0; j < 3; ++j) c.put_standard(j, j);
  Batch b;
  b.num_heads = 3;
  b.seq_lens = {3};
  b.query_lens = {1};
  b.tables = {{0}};
  b.sinks = {1.0f, -kInf, 5.0f};
  ASSERT_TRUE(reference_attention(b.build(c)).ok());
  const double e = std::exp(1.0);
  const double sum = 1 + e + e * e;
  // head 0: out = e^j / (e^1 + sum), so the weights add up to less than 1.
  expect_row(b, 0, 0, {0, 1, 2}, {1 / (e + sum), e / (e + sum), e * e / (e + sum)},
             std::log(e + sum));
  // head 1: a sink of -inf is no sink.
  expect_row(b, 0, 1, {0, 1, 2}, {kW3[0], kW3[1], kW3[2]}, kLse3);
  // head 2: a sink above every logit becomes the max (the stable path must still be exact).
  const double e5 = std::exp(5.0);
  expect_row(b, 0, 2, {0, 1, 2}, {1 / (e5 + sum), e / (e5 + sum), e * e / (e5 + sum)},
             std::log(e5 + sum));
}

// ------------------------------------------------------------------ GQA, fp8, output dtype

TEST(Oracle, GqaReadsKvHeadOfItsGroup) {
  // 6 query heads over 3 KV heads: heads 2g and 2g+1 read KV head g. One key, so the output
  // is exactly that head's value: KV head g's value is (g + 1) * e_0.
  Cache c(KVLayout::kSplit, 1, 2, 3);
  std::vector<float> k(3 * kD, 0.0f), v(3 * kD, 0.0f);
  for (int g = 0; g < 3; ++g) v[g * kD] = static_cast<float>(g + 1);
  c.put(0, k, v);
  Batch b;
  b.num_heads = 6;
  b.seq_lens = {1};
  b.query_lens = {1};
  b.tables = {{0}};
  ASSERT_TRUE(reference_attention(b.build(c)).ok());
  for (int h = 0; h < 6; ++h) expect_row(b, 0, h, {0}, {static_cast<double>(h / 2 + 1)}, 0.0);
}

TEST(Oracle, MqaSharesOneKvHead) {
  Cache c(KVLayout::kNHD, 1, 4, 1);
  for (int j = 0; j < 3; ++j) c.put_standard(j, j);
  Batch b;
  b.num_heads = 4;
  b.seq_lens = {3};
  b.query_lens = {1};
  b.tables = {{0}};
  ASSERT_TRUE(reference_attention(b.build(c)).ok());
  for (int h = 0; h < 4; ++h) expect_row(b, 0, h, {0, 1, 2}, {kW3[0], kW3[1], kW3[2]}, kLse3);
}

class OracleFp8 : public ::testing::TestWithParam<DType> {};

TEST_P(OracleFp8, ScalesAreAppliedOnRead) {
  // k_scale 2: key j is stored as fp8(j / 2) (exact) and read back as j, so the logits are j
  // again; ignoring k_scale on read would halve them. v_scale 0.5: value 2 is stored as 4 and
  // read back as 2; ignoring v_scale would double the output.
  Cache c(KVLayout::kNHD, 1, 4, 1, GetParam(), 0, /*k_scale=*/2.0f, /*v_scale=*/0.5f);
  for (int j = 0; j < 3; ++j) c.put_standard(j, j, /*key_mul=*/1.0f, /*value_mul=*/2.0f);
  // Stored bytes of token 2: key 2 / 2 = 1.0; value 2 / 0.5 = 4.0.
  const auto* kb = c.kmem.data();
  const auto* vb = c.vmem.data();
  const bool e4m3 = GetParam() == DType::kFloat8E4M3;
  EXPECT_EQ(kb[2 * kD + 0], e4m3 ? 0x38 : 0x3C);  // 1.0
  EXPECT_EQ(vb[2 * kD + 2], e4m3 ? 0x48 : 0x44);  // 4.0
  Batch b;
  b.seq_lens = {3};
  b.query_lens = {1};
  b.tables = {{0}};
  ASSERT_TRUE(reference_attention(b.build(c)).ok());
  // Logits 0.5 * 2 * j = j; value 2 at d = j.
  expect_row(b, 0, 0, {0, 1, 2}, {2 * kW3[0], 2 * kW3[1], 2 * kW3[2]}, kLse3);
}

INSTANTIATE_TEST_SUITE_P(All, OracleFp8,
                         ::testing::Values(DType::kFloat8E4M3, DType::kFloat8E5M2),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(to_string(info.param));
                         });

TEST(Oracle, Bf16OutputIsTheRoundedResult) {
  Cache c(KVLayout::kNHD, 1, 4, 1);
  for (int j = 0; j < 2; ++j) c.put_standard(j, j);
  Batch b;
  b.seq_lens = {2};
  b.query_lens = {1};
  b.tables = {{0}};
  b.out_dtype = DType::kBFloat16;
  ASSERT_TRUE(reference_attention(b.build(c)).ok());
  // 0.26894142 and 0.73105858 rounded to bf16 (8 significant bits): 0.26953125, 0.73046875.
  EXPECT_EQ(b.out16[Batch::kGuard + 0], numeric::float_to_bf16_bits(0.26953125f));
  EXPECT_EQ(b.out16[Batch::kGuard + 1], numeric::float_to_bf16_bits(0.73046875f));
  EXPECT_EQ(b.out16[Batch::kGuard + 2], 0);
  EXPECT_NEAR(b.lse(0, 0), kLse2, kTol);
}

// ------------------------------------------------------------------ skipped sequences

TEST(Oracle, EmptySequenceReadsAndWritesNothing) {
  // Sequence 1 has query_len 0: its block-table row holds ids far out of range (it must not
  // be read), and its rows do not exist, so sequence 2's row is output row 1.
  Cache c(KVLayout::kNHD, 3, 2, 1);
  for (int j = 0; j < 3; ++j) c.put_standard(j, j);                      // seq 0: blocks 0, 1
  c.put_standard(5, 1);                                                   // seq 2: block 2 slot 1
  c.put_standard(4, 0);                                                   // seq 2: block 2 slot 0
  Batch b;
  b.seq_lens = {3, 7, 2};
  b.query_lens = {1, 0, 1};
  b.tables = {{0, 1}, {999, -5, 12345, 7}, {2}};
  ASSERT_TRUE(reference_attention(b.build(c)).ok());
  expect_row(b, 0, 0, {0, 1, 2}, {kW3[0], kW3[1], kW3[2]}, kLse3);
  expect_row(b, 1, 0, {0, 1}, {kW2[0], kW2[1]}, kLse2);
  b.expect_guards_intact();
}

TEST(Oracle, AllSequencesEmptyLeavesOutputUntouched) {
  Cache c(KVLayout::kNHD, 1, 2, 1);
  Batch b;
  b.seq_lens = {4, 0};
  b.query_lens = {0, 0};
  b.tables = {{-1}, {-1}};
  ASSERT_TRUE(reference_attention(b.build(c)).ok());
  for (float v : b.out_mem) EXPECT_EQ(v, Batch::kSentinel);
  for (float v : b.lse_mem) EXPECT_EQ(v, Batch::kSentinel);
}

// ------------------------------------------------------------------ errors

TEST(Oracle, RejectsDeviceTensors) {
  Cache c(KVLayout::kNHD, 1, 2, 1);
  c.put_standard(0, 0);
  Batch b;
  b.seq_lens = {1};
  b.query_lens = {1};
  b.tables = {{0}};
  AttentionArgs a = b.build(c);
  for (TensorView* t : {&a.query, &a.cache.key, &a.cache.value, &a.block_table, &a.seq_lens,
                        &a.query_start_loc, &a.out, &a.lse}) {
    t->device = Device::cuda(0);
  }
  Status st = reference_attention(a);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("must be on the CPU"), std::string::npos) << st.message();
  for (float v : b.out_mem) EXPECT_EQ(v, Batch::kSentinel);
}

TEST(Oracle, ValidatesMetadataValues) {
  Cache c(KVLayout::kNHD, 1, 2, 1);
  Batch b;
  b.seq_lens = {1};
  b.query_lens = {2};  // seq_len < query_len
  b.tables = {{0}};
  Status st = reference_attention(b.build(c));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("seq_lens[0]"), std::string::npos) << st.message();
  for (float v : b.out_mem) EXPECT_EQ(v, Batch::kSentinel);

  Batch b2;
  b2.seq_lens = {2};
  b2.query_lens = {1};
  b2.tables = {{1}};  // block id 1 of a 1-block cache
  st = reference_attention(b2.build(c));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("block_table[0][0]"), std::string::npos) << st.message();
}

// ------------------------------------------------------------------ the writer oracle

struct WriteCase {
  KVLayout layout;
  DType dtype;
  std::int64_t page_pad;
  DType slot_dtype;
};

class WriteKvOracle : public ::testing::TestWithParam<WriteCase> {};

/// The element offset of (block b, head g, token t, dim d) in a cache built by make_kv_cache,
/// written out per layout from DESIGN.md §1 (independently of the oracle's stride walk).
std::int64_t expected_offset(const WriteCase& wc, bool is_key, std::int64_t b, std::int64_t g,
                             std::int64_t t, std::int64_t d, std::int64_t bs, std::int64_t kvh,
                             std::int64_t hs) {
  const std::int64_t block = b * (bs * kvh * hs + wc.page_pad);
  const std::int64_t x = 16 / static_cast<std::int64_t>(dtype_size(wc.dtype));
  switch (wc.layout) {
    case KVLayout::kSplit:
      return is_key ? block + g * hs * bs + (d / x) * bs * x + t * x + d % x
                    : block + g * hs * bs + d * bs + t;
    case KVLayout::kNHD: return block + t * kvh * hs + g * hs + d;
    case KVLayout::kHND: return block + g * bs * hs + t * hs + d;
  }
  return -1;
}

TEST_P(WriteKvOracle, StoresEachInputElementAtItsSlot) {
  const WriteCase wc = GetParam();
  const int bs = 3, kvh = 2, hs = 16, nb = 3;
  Cache c(wc.layout, nb, bs, kvh, wc.dtype, wc.page_pad, 1.0f, 1.0f, hs);
  const std::size_t es = dtype_size(wc.dtype);
  // A canary pattern that no input element has.
  std::fill(c.kmem.begin(), c.kmem.end(), 0xA5);
  std::fill(c.vmem.begin(), c.vmem.end(), 0x5A);
  const std::vector<unsigned char> k_before = c.kmem, v_before = c.vmem;

  // Four input rows (one padded beyond slot_mapping), key rows strided by 2 rows.
  const int rows = 4;
  std::vector<float> kin32(static_cast<std::size_t>(2 * rows * kvh * hs)),
      vin32(static_cast<std::size_t>(rows * kvh * hs));
  for (std::size_t i = 0; i < kin32.size(); ++i) kin32[i] = 1.0f + 0.25f * static_cast<float>(i);
  for (std::size_t i = 0; i < vin32.size(); ++i) vin32[i] = -3.0f - 0.5f * static_cast<float>(i);
  std::vector<unsigned char> kin(kin32.size() * es), vin(vin32.size() * es);
  for (std::size_t i = 0; i < kin32.size(); ++i) {
    numeric::store_from_float(kin.data(), wc.dtype, static_cast<std::int64_t>(i), kin32[i]);
  }
  for (std::size_t i = 0; i < vin32.size(); ++i) {
    numeric::store_from_float(vin.data(), wc.dtype, static_cast<std::int64_t>(i), vin32[i]);
  }
  TensorView key = TensorView::strided(kin.data(), wc.dtype, {rows, kvh, hs},
                                       {2 * kvh * hs, hs, 1});
  TensorView value = TensorView::contiguous(vin.data(), wc.dtype, {rows, kvh, hs});

  // Token 1 is padding; tokens land in the last slot of block 2, the first of block 0 and the
  // middle of block 1. Row 3 of the inputs is past num_tokens and must be ignored.
  std::int64_t slots[3] = {8, -1, 0};
  std::int64_t slots2[1] = {4};
  std::int32_t s32[3] = {8, -1, 0};
  TensorView sm = wc.slot_dtype == DType::kInt64
                      ? TensorView::contiguous(slots, DType::kInt64, {3})
                      : TensorView::contiguous(s32, DType::kInt32, {3});
  Status st = reference_write_kv(key, value, sm, c.cache);
  ASSERT_TRUE(st.ok()) << st.to_string();
  // A second call with a single token, reading row 0 again, into slot 4.
  st = reference_write_kv(key, value,
                          TensorView::contiguous(slots2, DType::kInt64, {1}),
                          c.cache);
  ASSERT_TRUE(st.ok()) << st.to_string();

  std::vector<unsigned char> k_want = k_before, v_want = v_before;
  auto expect_token = [&](int token, std::int64_t slot) {
    for (int g = 0; g < kvh; ++g) {
      for (int d = 0; d < hs; ++d) {
        const std::int64_t ko = expected_offset(wc, true, slot / bs, g, slot % bs, d, bs, kvh, hs);
        const std::int64_t vo = expected_offset(wc, false, slot / bs, g, slot % bs, d, bs, kvh, hs);
        std::memcpy(&k_want[ko * es], &kin[((token * 2 * kvh + g) * hs + d) * es], es);
        std::memcpy(&v_want[vo * es], &vin[((token * kvh + g) * hs + d) * es], es);
      }
    }
  };
  expect_token(0, 8);
  expect_token(2, 0);
  expect_token(0, 4);
  EXPECT_EQ(c.kmem, k_want);
  EXPECT_EQ(c.vmem, v_want);
}

INSTANTIATE_TEST_SUITE_P(
    All, WriteKvOracle,
    ::testing::Values(WriteCase{KVLayout::kSplit, DType::kFloat32, 0, DType::kInt64},
                      WriteCase{KVLayout::kSplit, DType::kFloat16, 7, DType::kInt32},
                      WriteCase{KVLayout::kSplit, DType::kBFloat16, 0, DType::kInt32},
                      WriteCase{KVLayout::kNHD, DType::kFloat32, 7, DType::kInt32},
                      WriteCase{KVLayout::kNHD, DType::kBFloat16, 0, DType::kInt64},
                      WriteCase{KVLayout::kHND, DType::kFloat16, 0, DType::kInt64},
                      WriteCase{KVLayout::kHND, DType::kFloat32, 7, DType::kInt32}),
    [](const ::testing::TestParamInfo<WriteCase>& info) {
      return std::string(to_string(info.param.layout)) + "_" + to_string(info.param.dtype) +
             "_pad" + std::to_string(info.param.page_pad) + "_" + to_string(info.param.slot_dtype);
    });

TEST(WriteKvOracleFp8, QuantisesInputOverScaleRoundingToNearestEvenAndSaturating) {
  // nhd, one block of 2 tokens, one head of 16 (so the split rule does not matter).
  for (DType dt : {DType::kFloat8E4M3, DType::kFloat8E5M2}) {
    SCOPED_TRACE(to_string(dt));
    Cache c(KVLayout::kNHD, 1, 2, 1, dt, 0, /*k_scale=*/2.0f, /*v_scale=*/0.25f, 16);
    std::vector<float> k(16, 0.0f), v(16, 0.0f);
    k[0] = 3.0f;      // / 2 = 1.5
    k[1] = -1.0f;     // / 2 = -0.5
    k[2] = 2.0e6f;    // / 2 = 1e6: saturates
    // Ties: e4m3 steps by 1/8 near 1, e5m2 by 1/4. One tie rounds down to an even code, the
    // other up.
    const bool e4m3 = dt == DType::kFloat8E4M3;
    k[3] = e4m3 ? 2.125f : 2.25f;  // / 2 = 1.0625 | 1.125 -> 1.0
    k[4] = e4m3 ? 2.375f : 2.75f;  // / 2 = 1.1875 | 1.375 -> 1.25 | 1.5
    v[0] = 0.25f;     // / 0.25 = 1
    v[1] = -1.0e9f;   // saturates negative
    c.put(1, k, v);
    const unsigned char* kb = c.kmem.data() + 16;  // slot 1
    const unsigned char* vb = c.vmem.data() + 16;
    if (e4m3) {
      EXPECT_EQ(kb[0], 0x3C);  // 1.5
      EXPECT_EQ(kb[1], 0xB0);  // -0.5
      EXPECT_EQ(kb[2], 0x7E);  // 448
      EXPECT_EQ(kb[3], 0x38);  // 1.0
      EXPECT_EQ(kb[4], 0x3A);  // 1.25
      EXPECT_EQ(vb[0], 0x38);  // 1.0
      EXPECT_EQ(vb[1], 0xFE);  // -448
    } else {
      EXPECT_EQ(kb[0], 0x3E);  // 1.5
      EXPECT_EQ(kb[1], 0xB8);  // -0.5
      EXPECT_EQ(kb[2], 0x7B);  // 57344
      EXPECT_EQ(kb[3], 0x3C);  // 1.0
      EXPECT_EQ(kb[4], 0x3E);  // 1.5
      EXPECT_EQ(vb[0], 0x3C);  // 1.0
      EXPECT_EQ(vb[1], 0xFB);  // -57344
    }
    EXPECT_EQ(kb[5], 0x00);  // +0
    // Slot 0 was not written: still NaN.
    for (int i = 0; i < 16; ++i) EXPECT_EQ(c.kmem[i], 0x7F);
  }
}

TEST(WriteKvOracleFp8, Bf16InputIsDividedAsItsValue) {
  Cache c(KVLayout::kHND, 1, 1, 1, DType::kFloat8E4M3, 0, /*k_scale=*/4.0f, 1.0f, 16);
  std::vector<std::uint16_t> k(16, 0), v(16, 0);
  k[0] = numeric::float_to_bf16_bits(6.0f);  // 6 / 4 = 1.5
  v[0] = numeric::float_to_bf16_bits(-2.0f);
  std::int32_t slot = 0;
  Status st = reference_write_kv(TensorView::contiguous(k.data(), DType::kBFloat16, {1, 1, 16}),
                                 TensorView::contiguous(v.data(), DType::kBFloat16, {1, 1, 16}),
                                 TensorView::contiguous(&slot, DType::kInt32, {1}), c.cache);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(c.kmem[0], 0x3C);
  EXPECT_EQ(c.vmem[0], 0xC0);  // -2.0
}

TEST(WriteKvOracle, RejectsDuplicateSlotsWithoutWriting) {
  Cache c(KVLayout::kNHD, 2, 2, 1);
  std::fill(c.kmem.begin(), c.kmem.end(), 0xA5);
  const std::vector<unsigned char> before = c.kmem;
  std::vector<float> k(2 * kD, 1.0f), v(2 * kD, 2.0f);
  std::int64_t slots[2] = {3, 3};
  Status st = reference_write_kv(TensorView::contiguous(k.data(), DType::kFloat32, {2, 1, kD}),
                                 TensorView::contiguous(v.data(), DType::kFloat32, {2, 1, kD}),
                                 TensorView::contiguous(slots, DType::kInt64, {2}), c.cache);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("slot_mapping[0] and slot_mapping[1]"), std::string::npos)
      << st.message();
  EXPECT_EQ(c.kmem, before);

  slots[1] = 4;  // == num_slots
  st = reference_write_kv(TensorView::contiguous(k.data(), DType::kFloat32, {2, 1, kD}),
                          TensorView::contiguous(v.data(), DType::kFloat32, {2, 1, kD}),
                          TensorView::contiguous(slots, DType::kInt64, {2}), c.cache);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("slot_mapping[1] = 4"), std::string::npos) << st.message();
  EXPECT_EQ(c.kmem, before);
}

TEST(WriteKvOracle, RejectsDeviceTensors) {
  Cache c(KVLayout::kNHD, 1, 2, 1);
  std::vector<float> k(kD, 1.0f), v(kD, 2.0f);
  std::int64_t slot = 0;
  TensorView key = TensorView::contiguous(k.data(), DType::kFloat32, {1, 1, kD}, Device::cuda(0));
  TensorView value = TensorView::contiguous(v.data(), DType::kFloat32, {1, 1, kD}, Device::cuda(0));
  TensorView sm = TensorView::contiguous(&slot, DType::kInt64, {1}, Device::cuda(0));
  KVCache cache = c.cache;
  cache.key.device = cache.value.device = Device::cuda(0);
  Status st = reference_write_kv(key, value, sm, cache);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("must be on the CPU"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace pagedattn
