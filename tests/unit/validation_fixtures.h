// Shared by the validation tests (test_validation_*.cpp): the helpers and the two fixtures
// (a small valid attention batch, a small write_kv call), each proving that its unmodified
// arguments are accepted. In a named namespace: GoogleTest requires one fixture type per suite
// across translation units.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "pagedattn/pagedattn.h"
#include "src/core/numeric.h"

namespace pagedattn::validation_test {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

/// Bytes of a vector, for before/after comparisons.
template <class T>
std::vector<std::uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<std::uint8_t> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

inline std::vector<std::uint16_t> half_values(std::size_t n, float amplitude, std::uint32_t salt) {
  std::vector<std::uint16_t> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    // A deterministic, non-constant pattern in [-amplitude, amplitude].
    const float x = amplitude * std::sin(0.37f * static_cast<float>(i) + static_cast<float>(salt));
    v[i] = numeric::float_to_half_bits(x);
  }
  return v;
}

#define EXPECT_REJECTED(status, code_, fragment)                                 \
  do {                                                                           \
    const ::pagedattn::Status st_ = (status);                                    \
    EXPECT_EQ(st_.code(), (code_)) << st_.to_string();                           \
    EXPECT_NE(st_.message().find(fragment), std::string::npos)                   \
        << "message \"" << st_.message() << "\" lacks \"" << (fragment) << "\""; \
  } while (0)

// ===================================================================== attention
/// A small valid batch: nhd fp16 cache of 8 blocks x 4 tokens, 4 query heads over 2 KV heads,
/// head_size 32; sequence 0 is a 2-token chunk at seq_len 5, sequence 1 a decode at seq_len 3.
class AttentionValidation : public ::testing::Test {
 protected:
  static constexpr int H = 4, KVH = 2, D = 32, BS = 4, NB = 8, T = 3;

  void SetUp() override {
    query = half_values(T * H * D, 1.0f, 1);
    out.assign(T * H * D, 0x7E00);  // NaN: a rejected call must leave it so
    lse.assign(T * H, kNaN);
    key_cache = half_values(NB * BS * KVH * D, 1.0f, 2);
    value_cache = half_values(NB * BS * KVH * D, 1.0f, 3);
    alibi.assign(H, 0.25f);
    sinks.assign(H, 0.5f);
    block_table = {3, 6, 1, 0};
    seq_lens = {5, 3};
    qsl = {0, 2, 3};

    args.query = TensorView::contiguous(query.data(), DType::kFloat16, {T, H, D});
    args.out = TensorView::contiguous(out.data(), DType::kFloat16, {T, H, D});
    args.lse = TensorView::contiguous(lse.data(), DType::kFloat32, {T, H});
    args.cache.layout = KVLayout::kNHD;
    args.cache.key = TensorView::contiguous(key_cache.data(), DType::kFloat16, {NB, BS, KVH, D});
    args.cache.value =
        TensorView::contiguous(value_cache.data(), DType::kFloat16, {NB, BS, KVH, D});
    args.block_table = TensorView::contiguous(block_table.data(), DType::kInt32, {2, 2});
    args.seq_lens = TensorView::contiguous(seq_lens.data(), DType::kInt32, {2});
    args.query_start_loc = TensorView::contiguous(qsl.data(), DType::kInt32, {3});
    args.params.scale = default_scale(D);
    snapshot();
  }

  void snapshot() {
    out_before = bytes_of(out);
    lse_before = bytes_of(lse);
    key_before = bytes_of(key_cache);
    value_before = bytes_of(value_cache);
  }

  /// Nothing the call may write has changed.
  void ExpectUntouched() {
    EXPECT_TRUE(bytes_of(out) == out_before) << "out was written by a failing call";
    EXPECT_TRUE(bytes_of(lse) == lse_before) << "lse was written by a failing call";
    EXPECT_TRUE(bytes_of(key_cache) == key_before) << "key cache changed";
    EXPECT_TRUE(bytes_of(value_cache) == value_before) << "value cache changed";
  }

  /// `args` as a batch of no sequences and no tokens, writing into `out_view` and `lse_view`
  /// (zero-token views of out and lse).
  void UseEmptyBatch(const TensorView& out_view, const TensorView& lse_view) {
    args.query = TensorView::contiguous(query.data(), DType::kFloat16, {0, H, D});
    args.out = out_view;
    args.lse = lse_view;
    args.block_table = TensorView::contiguous(block_table.data(), DType::kInt32, {0, 2});
    args.seq_lens = TensorView::contiguous(seq_lens.data(), DType::kInt32, {0});
    args.query_start_loc = TensorView::contiguous(zero.data(), DType::kInt32, {1});
  }
  std::vector<std::int32_t> zero = {0};  // query_start_loc of an empty batch

  /// paged_attention (plan + run) on `a`, expecting `code` and `fragment`.
  void Expect(const AttentionArgs& a, StatusCode code, const std::string& fragment) {
    EXPECT_REJECTED(paged_attention(a, HostMetadata::from_args(a)), code, fragment);
    ExpectUntouched();
  }
  void Expect(StatusCode code, const std::string& fragment) { Expect(args, code, fragment); }

  std::vector<std::uint16_t> query, out, key_cache, value_cache;
  std::vector<float> lse, alibi, sinks;
  std::vector<std::int32_t> block_table, seq_lens, qsl;
  std::vector<std::uint8_t> out_before, lse_before, key_before, value_before;
  AttentionArgs args;
};

// ===================================================================== write_kv
/// An nhd fp16 cache of 8 blocks x 4 tokens (32 slots), 2 KV heads of 32; three key/value rows
/// written to slots 5 and 17, the third skipped (slot -1).
class WriteKvValidation : public ::testing::Test {
 protected:
  static constexpr int KVH = 2, D = 32, BS = 4, NB = 8, N = 3;

  void SetUp() override {
    key = half_values(N * KVH * D, 1.0f, 4);
    value = half_values(N * KVH * D, 1.0f, 5);
    key_cache.assign(NB * BS * KVH * D, 0x7E00);
    value_cache.assign(NB * BS * KVH * D, 0x7E00);
    slots = {5, 17, -1};
    k = TensorView::contiguous(key.data(), DType::kFloat16, {N, KVH, D});
    v = TensorView::contiguous(value.data(), DType::kFloat16, {N, KVH, D});
    sm = TensorView::contiguous(slots.data(), DType::kInt64, {N});
    cache.layout = KVLayout::kNHD;
    cache.key = TensorView::contiguous(key_cache.data(), DType::kFloat16, {NB, BS, KVH, D});
    cache.value = TensorView::contiguous(value_cache.data(), DType::kFloat16, {NB, BS, KVH, D});
    key_before = bytes_of(key_cache);
    value_before = bytes_of(value_cache);
  }

  void Expect(StatusCode code, const std::string& fragment) {
    EXPECT_REJECTED(write_kv(k, v, sm, cache), code, fragment);
    EXPECT_TRUE(bytes_of(key_cache) == key_before) << "key cache changed by a failing write_kv";
    EXPECT_TRUE(bytes_of(value_cache) == value_before)
        << "value cache changed by a failing write_kv";
  }

  std::vector<std::uint16_t> key, value, key_cache, value_cache;
  std::vector<std::int64_t> slots;
  std::vector<std::uint8_t> key_before, value_before;
  TensorView k, v, sm;
  KVCache cache;
};

}  // namespace pagedattn::validation_test
