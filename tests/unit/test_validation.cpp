// Negative tests, one per validation rule (DESIGN.md §3 "Errors", §4 "Negative tests"): each
// asserts the exact StatusCode, a message fragment naming the argument, and that the call
// changed nothing (cache, out and lse bytes are compared before and after). Each fixture first
// proves that its unmodified arguments are accepted, so every rejection below is caused by the
// one thing the test breaks.
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

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

/// Bytes of a vector, for before/after comparisons.
template <class T>
std::vector<std::uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<std::uint8_t> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<std::uint16_t> half_values(std::size_t n, float amplitude, std::uint32_t salt) {
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

TEST_F(AttentionValidation, FixtureIsAcceptedAndWritesEveryRow) {
  args.params.alibi_slopes = TensorView::contiguous(alibi.data(), DType::kFloat32, {H});
  args.params.sinks = TensorView::contiguous(sinks.data(), DType::kFloat32, {H});
  const Status st = paged_attention(args, HostMetadata::from_args(args));
  ASSERT_TRUE(st.ok()) << st.to_string();
  for (std::uint16_t h : out) ASSERT_FALSE(std::isnan(numeric::half_bits_to_float(h)));
  for (float v : lse) ASSERT_TRUE(std::isfinite(v));
  EXPECT_TRUE(bytes_of(key_cache) == key_before) << "attention must not write the cache";
}

// ---- query
TEST_F(AttentionValidation, QueryWrongNdim) {
  args.query = TensorView::contiguous(query.data(), DType::kFloat16, {T, H * D});
  Expect(StatusCode::kInvalidArgument, "query.ndim");
}
TEST_F(AttentionValidation, QueryAbsent) {
  args.query = TensorView{};
  Expect(StatusCode::kInvalidArgument, "query");
}
TEST_F(AttentionValidation, QueryIntegerDtype) {
  args.query.dtype = DType::kInt32;
  Expect(StatusCode::kInvalidArgument, "query.dtype");
}
TEST_F(AttentionValidation, QueryFp8DtypeIsNotAQueryDtype) {
  args.query.dtype = DType::kFloat8E4M3;
  Expect(StatusCode::kInvalidArgument, "query.dtype");
}
TEST_F(AttentionValidation, QueryLastDimNotContiguous) {
  args.query = TensorView::strided(query.data(), DType::kFloat16, {T, H, D / 2}, {H * D, D, 2});
  args.out = TensorView::contiguous(out.data(), DType::kFloat16, {T, H, D / 2});
  Expect(StatusCode::kInvalidArgument, "query.strides[2]");
}
TEST_F(AttentionValidation, QueryNegativeStride) {
  args.query.strides[0] = -H * D;
  Expect(StatusCode::kInvalidArgument, "query.strides[0]");
}
TEST_F(AttentionValidation, QueryNullDataIsCaughtBeforeAnyWrite) {
  args.query.data = nullptr;
  Expect(StatusCode::kInvalidArgument, "query.data");
}

// ---- out / lse
TEST_F(AttentionValidation, OutWrongShape) {
  args.out = TensorView::contiguous(out.data(), DType::kFloat16, {T - 1, H, D});
  Expect(StatusCode::kInvalidArgument, "out.shape[0]");
}
TEST_F(AttentionValidation, OutDtypeDiffersFromQuery) {
  args.out.dtype = DType::kBFloat16;
  Expect(StatusCode::kInvalidArgument, "out.dtype");
}
TEST_F(AttentionValidation, OutAbsent) {
  args.out = TensorView{};
  Expect(StatusCode::kInvalidArgument, "out");
}
TEST_F(AttentionValidation, OutLastDimNotContiguous) {
  args.out.strides[2] = 2;
  args.out.strides[1] = 2 * D;
  args.out.strides[0] = 2 * D * H;
  args.out.shape[0] = 1;  // keep the span inside the buffer
  args.query.shape[0] = 1;
  qsl = {0, 1, 1};
  Expect(StatusCode::kInvalidArgument, "out.strides[2]");
}
TEST_F(AttentionValidation, LseWrongDtype) {
  args.lse.dtype = DType::kFloat16;
  Expect(StatusCode::kInvalidArgument, "lse.dtype");
}
TEST_F(AttentionValidation, LseWrongNdim) {
  args.lse = TensorView::contiguous(lse.data(), DType::kFloat32, {T * H});
  Expect(StatusCode::kInvalidArgument, "lse.ndim");
}
TEST_F(AttentionValidation, LseWrongShape) {
  args.lse = TensorView::contiguous(lse.data(), DType::kFloat32, {T, H - 1});
  Expect(StatusCode::kInvalidArgument, "lse.shape[1]");
}

// ---- cache
TEST_F(AttentionValidation, KeyCacheWrongNdim) {
  args.cache.key = TensorView::contiguous(key_cache.data(), DType::kFloat16, {NB, BS, KVH * D});
  Expect(StatusCode::kInvalidArgument, "key_cache.ndim");
}
TEST_F(AttentionValidation, SplitKeyCacheNeedsFiveDims) {
  args.cache.layout = KVLayout::kSplit;
  // nhd-shaped tensors are 4-D; split's key is [blocks, heads, D/x, block, x].
  Expect(StatusCode::kInvalidArgument, "key_cache.ndim");
}
TEST_F(AttentionValidation, SplitKeyCacheWrongX) {
  args.cache.layout = KVLayout::kSplit;
  args.cache.key =
      TensorView::contiguous(key_cache.data(), DType::kFloat16, {NB, KVH, D / 4, BS, 4});
  args.cache.value = TensorView::contiguous(value_cache.data(), DType::kFloat16, {NB, KVH, D, BS});
  Expect(StatusCode::kInvalidArgument, "key_cache.shape[4]");
}
TEST_F(AttentionValidation, ValueCacheShapeDiffersFromKey) {
  args.cache.value =
      TensorView::contiguous(value_cache.data(), DType::kFloat16, {NB / 2, BS, KVH, D});
  Expect(StatusCode::kInvalidArgument, "value_cache.shape[0]");
}
TEST_F(AttentionValidation, CacheDtypeDiffersFromQuery) {
  args.cache.key.dtype = DType::kBFloat16;
  args.cache.value.dtype = DType::kBFloat16;
  Expect(StatusCode::kInvalidArgument, "key_cache.dtype");
}
TEST_F(AttentionValidation, KeyAndValueCacheDtypesDiffer) {
  args.cache.value.dtype = DType::kBFloat16;
  Expect(StatusCode::kInvalidArgument, "value_cache.dtype");
}
TEST_F(AttentionValidation, CacheIntegerDtype) {
  args.cache.key.dtype = DType::kInt32;
  args.cache.value.dtype = DType::kInt32;
  Expect(StatusCode::kInvalidArgument, "key_cache.dtype");
}
TEST_F(AttentionValidation, CacheInnerDimNotContiguous) {
  args.cache.key = TensorView::strided(key_cache.data(), DType::kFloat16, {NB, BS, KVH, D / 2},
                                       {BS * KVH * D, KVH * D, D, 2});
  args.cache.value =
      TensorView::contiguous(value_cache.data(), DType::kFloat16, {NB, BS, KVH, D / 2});
  Expect(StatusCode::kInvalidArgument, "key_cache.strides[3]");
}
TEST_F(AttentionValidation, OverlappingBlocks) {
  // stride(0) smaller than one block: block b+1 would start inside block b.
  args.cache.key.strides[0] = BS * KVH * D / 2;
  Expect(StatusCode::kInvalidArgument, "overlap");
}
TEST_F(AttentionValidation, NumHeadsNotAMultipleOfKvHeads) {
  args.query = TensorView::contiguous(query.data(), DType::kFloat16, {1, 3, D});
  args.out = TensorView::contiguous(out.data(), DType::kFloat16, {1, 3, D});
  args.lse = TensorView{};
  qsl = {0, 1, 1};
  Expect(StatusCode::kInvalidArgument, "not a multiple of num_kv_heads");
}
TEST_F(AttentionValidation, HeadSizeDiffersBetweenQueryAndCache) {
  args.query = TensorView::contiguous(query.data(), DType::kFloat16, {T, H / 2, 2 * D});
  args.out = TensorView::contiguous(out.data(), DType::kFloat16, {T, H / 2, 2 * D});
  args.lse = TensorView::contiguous(lse.data(), DType::kFloat32, {T, H / 2});
  Expect(StatusCode::kInvalidArgument, "head_size");
}
TEST_F(AttentionValidation, HeadSizeAbove512IsUnsupported) {
  // 520 = 65 * 8: a multiple of 8 but past the supported range. Planning reads shapes only.
  args.query = TensorView::contiguous(nullptr, DType::kFloat16, {T, H, 520});
  args.out = TensorView::contiguous(nullptr, DType::kFloat16, {T, H, 520});
  args.cache.key = TensorView::contiguous(nullptr, DType::kFloat16, {NB, BS, KVH, 520});
  args.cache.value = args.cache.key;
  EXPECT_REJECTED(plan_attention(args, HostMetadata::from_args(args)).status(),
                  StatusCode::kUnsupported, "head_size");
  ExpectUntouched();
}
TEST_F(AttentionValidation, NumHeadsAboveInt32IsRejected) {
  // Stride-0 views: a shape the kernels' 32-bit head index cannot hold, without the memory.
  const std::int64_t heads = (std::int64_t{1} << 32) + 2;
  args.query = TensorView::strided(query.data(), DType::kFloat16, {T, heads, D}, {0, 0, 1});
  args.out = TensorView::strided(nullptr, DType::kFloat16, {T, heads, D}, {heads * D, D, 1});
  args.lse = TensorView{};
  EXPECT_REJECTED(plan_attention(args, HostMetadata::from_args(args)).status(),
                  StatusCode::kInvalidArgument, "num_heads");
  ExpectUntouched();
}
TEST_F(AttentionValidation, SplitHeadSizeIsCheckedBeforeItIsNarrowed) {
  // key_cache.shape[2] * x = (2^29 + 1) * 8 would wrap to 8 in 32 bits.
  args.cache.layout = KVLayout::kSplit;
  args.cache.key = TensorView::contiguous(nullptr, DType::kFloat16,
                                          {NB, KVH, (std::int64_t{1} << 29) + 1, BS, 8});
  args.cache.value = TensorView::contiguous(nullptr, DType::kFloat16, {NB, KVH, 8, BS});
  EXPECT_REJECTED(plan_attention(args, HostMetadata::from_args(args)).status(),
                  StatusCode::kUnsupported, "head_size");
  ExpectUntouched();
}
TEST_F(AttentionValidation, HeadSizeNotAMultipleOf8IsUnsupported) {
  args.query = TensorView::contiguous(nullptr, DType::kFloat16, {T, H, 20});
  args.out = TensorView::contiguous(nullptr, DType::kFloat16, {T, H, 20});
  args.cache.key = TensorView::contiguous(nullptr, DType::kFloat16, {NB, BS, KVH, 20});
  args.cache.value = args.cache.key;
  EXPECT_REJECTED(plan_attention(args, HostMetadata::from_args(args)).status(),
                  StatusCode::kUnsupported, "head_size");
}
TEST_F(AttentionValidation, ZeroHeadSize) {
  args.query = TensorView::contiguous(nullptr, DType::kFloat16, {T, H, 0});
  args.out = args.query;
  args.cache.key = TensorView::contiguous(nullptr, DType::kFloat16, {NB, BS, KVH, 0});
  args.cache.value = args.cache.key;
  EXPECT_REJECTED(plan_attention(args, HostMetadata::from_args(args)).status(),
                  StatusCode::kInvalidArgument, "key_cache.shape[3]");
}
TEST_F(AttentionValidation, Fp8ScaleNotPositive) {
  std::vector<std::uint8_t> k8(NB * BS * KVH * D, 0x38), v8(NB * BS * KVH * D, 0x38);
  args.cache.key = TensorView::contiguous(k8.data(), DType::kFloat8E4M3, {NB, BS, KVH, D});
  args.cache.value = TensorView::contiguous(v8.data(), DType::kFloat8E4M3, {NB, BS, KVH, D});
  for (float bad : {0.0f, -1.0f, kNaN, kInf}) {
    args.cache.k_scale = bad;
    args.cache.v_scale = 1.0f;
    Expect(StatusCode::kInvalidArgument, "k_scale");
    args.cache.k_scale = 1.0f;
    args.cache.v_scale = bad;
    Expect(StatusCode::kInvalidArgument, "v_scale");
  }
  args.cache.v_scale = 1.0f;
  EXPECT_TRUE(paged_attention(args, HostMetadata::from_args(args)).ok())
      << "the fp8 variant of the fixture must be accepted";
}

// ---- metadata tensors (shapes and dtypes)
TEST_F(AttentionValidation, BlockTableInt64) {
  args.block_table.dtype = DType::kInt64;
  Expect(StatusCode::kInvalidArgument, "block_table.dtype");
}
TEST_F(AttentionValidation, BlockTableWrongNdim) {
  args.block_table = TensorView::contiguous(block_table.data(), DType::kInt32, {4});
  Expect(StatusCode::kInvalidArgument, "block_table.ndim");
}
TEST_F(AttentionValidation, BlockTableRowsDifferFromNumSeqs) {
  args.block_table = TensorView::contiguous(block_table.data(), DType::kInt32, {1, 2});
  Expect(StatusCode::kInvalidArgument, "block_table.shape[0]");
}
TEST_F(AttentionValidation, SeqLensInt64) {
  args.seq_lens.dtype = DType::kInt64;
  Expect(StatusCode::kInvalidArgument, "seq_lens.dtype");
}
TEST_F(AttentionValidation, SeqLensWrongNdim) {
  args.seq_lens = TensorView::contiguous(seq_lens.data(), DType::kInt32, {2, 1});
  Expect(StatusCode::kInvalidArgument, "seq_lens.ndim");
}
TEST_F(AttentionValidation, QueryStartLocWrongLength) {
  args.query_start_loc = TensorView::contiguous(qsl.data(), DType::kInt32, {2});
  Expect(StatusCode::kInvalidArgument, "query_start_loc.shape[0]");
}
TEST_F(AttentionValidation, QueryStartLocFloatDtype) {
  args.query_start_loc.dtype = DType::kFloat32;
  Expect(StatusCode::kInvalidArgument, "query_start_loc.dtype");
}
TEST_F(AttentionValidation, HostMetadataShapeDiffersFromArgs) {
  HostMetadata host = HostMetadata::from_args(args);
  host.seq_lens = TensorView::contiguous(seq_lens.data(), DType::kInt32, {1});
  EXPECT_REJECTED(paged_attention(args, host), StatusCode::kInvalidArgument, "seq_lens");
  ExpectUntouched();
}
TEST_F(AttentionValidation, HostMetadataOnTheGpuIsRejected) {
  HostMetadata host = HostMetadata::from_args(args);
  host.block_table.device = Device::cuda(0);
  EXPECT_REJECTED(paged_attention(args, host), StatusCode::kInvalidArgument, "block_table");
  ExpectUntouched();
}

// ---- metadata values (checked in plan from the host copies)
TEST_F(AttentionValidation, QueryStartLocNotStartingAtZero) {
  qsl = {1, 2, 3};
  Expect(StatusCode::kInvalidArgument, "query_start_loc[0]");
}
TEST_F(AttentionValidation, QueryStartLocDecreasing) {
  // 0, 3, 2, 3: the middle step goes backwards.
  std::vector<std::int32_t> q4 = {0, 3, 2, 3};
  std::vector<std::int32_t> s3 = {5, 3, 3};
  std::vector<std::int32_t> bt3 = {3, 6, 1, 0, 2, 0};
  args.query_start_loc = TensorView::contiguous(q4.data(), DType::kInt32, {4});
  args.seq_lens = TensorView::contiguous(s3.data(), DType::kInt32, {3});
  args.block_table = TensorView::contiguous(bt3.data(), DType::kInt32, {3, 2});
  Expect(StatusCode::kInvalidArgument, "non-decreasing");
}
TEST_F(AttentionValidation, QueryStartLocLastIsNotNumTokens) {
  qsl = {0, 2, 2};
  Expect(StatusCode::kInvalidArgument, "query_start_loc[2]");
}
TEST_F(AttentionValidation, SeqLenShorterThanQueryLen) {
  seq_lens = {1, 3};  // sequence 0 has 2 new tokens
  Expect(StatusCode::kInvalidArgument, "seq_lens[0]");
}
TEST_F(AttentionValidation, NegativeSeqLen) {
  seq_lens = {5, -1};
  Expect(StatusCode::kInvalidArgument, "seq_lens[1]");
}
TEST_F(AttentionValidation, BlockTableTooNarrowForSeqLen) {
  seq_lens = {9, 3};  // 9 tokens need 3 blocks of 4; the table has 2 columns
  Expect(StatusCode::kInvalidArgument, "block_table.shape[1]");
}
TEST_F(AttentionValidation, NegativeBlockId) {
  block_table[1] = -1;
  Expect(StatusCode::kInvalidArgument, "block_table[0][1]");
}
TEST_F(AttentionValidation, BlockIdEqualToNumBlocks) {
  block_table[2] = NB;
  Expect(StatusCode::kInvalidArgument, "block_table[1][0]");
}
TEST_F(AttentionValidation, UnreadBlockTableEntriesAreNotChecked) {
  // Sequence 1 (seq_len 3) reads one block; the entry after it is never read, so any value
  // there is fine (serving engines leave stale ids). This documents the rule's exact extent.
  block_table[3] = -7;
  EXPECT_TRUE(paged_attention(args, HostMetadata::from_args(args)).ok());
}

// ---- scalar parameters
TEST_F(AttentionValidation, NegativeSoftcap) {
  args.params.softcap = -1.0f;
  Expect(StatusCode::kInvalidArgument, "softcap");
}
TEST_F(AttentionValidation, NanSoftcap) {
  args.params.softcap = kNaN;
  Expect(StatusCode::kInvalidArgument, "softcap");
}
TEST_F(AttentionValidation, NegativeWindow) {
  args.params.sliding_window = -1;
  Expect(StatusCode::kInvalidArgument, "sliding_window");
}
TEST_F(AttentionValidation, ScaleNotFinitePositive) {
  for (float bad : {0.0f, -0.125f, kNaN, kInf}) {
    args.params.scale = bad;
    Expect(StatusCode::kInvalidArgument, "scale");
  }
}

// ---- optional per-head tensors
TEST_F(AttentionValidation, AlibiWrongLength) {
  args.params.alibi_slopes = TensorView::contiguous(alibi.data(), DType::kFloat32, {H - 1});
  Expect(StatusCode::kInvalidArgument, "alibi_slopes.shape[0]");
}
TEST_F(AttentionValidation, AlibiWrongDtype) {
  args.params.alibi_slopes = TensorView::contiguous(alibi.data(), DType::kFloat16, {H});
  Expect(StatusCode::kInvalidArgument, "alibi_slopes.dtype");
}
TEST_F(AttentionValidation, AlibiWrongNdim) {
  args.params.alibi_slopes = TensorView::contiguous(alibi.data(), DType::kFloat32, {1, H});
  Expect(StatusCode::kInvalidArgument, "alibi_slopes.ndim");
}
TEST_F(AttentionValidation, SinksWrongLength) {
  args.params.sinks = TensorView::contiguous(sinks.data(), DType::kFloat32, {H + 1});
  Expect(StatusCode::kInvalidArgument, "sinks.shape[0]");
}
TEST_F(AttentionValidation, SinksWrongDtype) {
  args.params.sinks = TensorView::contiguous(sinks.data(), DType::kBFloat16, {H});
  Expect(StatusCode::kInvalidArgument, "sinks.dtype");
}

// ---- devices
TEST_F(AttentionValidation, MixedDevicesAreRejected) {
  // The query decides the call's device; a cache elsewhere is a usage error, never a launch.
  args.cache.key.device = Device::cuda(0);
  args.cache.value.device = Device::cuda(0);
  Expect(StatusCode::kInvalidArgument, "device");
}
TEST_F(AttentionValidation, KeyAndValueCacheOnDifferentDevices) {
  args.cache.value.device = Device::cuda(0);
  Expect(StatusCode::kInvalidArgument, "value_cache.device");
}
TEST_F(AttentionValidation, EmptyBatchIsANoOp) {
  // No sequences at all: valid, and nothing is written.
  UseEmptyBatch(TensorView::contiguous(out.data(), DType::kFloat16, {0, H, D}),
                TensorView::contiguous(lse.data(), DType::kFloat32, {0, H}));
  const Status st = paged_attention(args, HostMetadata::from_args(args));
  EXPECT_TRUE(st.ok()) << st.to_string();
  ExpectUntouched();
}
TEST_F(AttentionValidation, EmptyOutputsWithBroadcastStridesAreAccepted) {
  // Zero-element outputs have no two elements at one address, whatever their strides (an
  // empty tensor expanded over heads: stride 0 in a dimension of extent > 1). Rejecting them
  // as "elements overlap" fails an empty batch (e.g. a padded CUDA-graph step) for nothing.
  UseEmptyBatch(TensorView::strided(out.data(), DType::kFloat16, {0, H, D}, {D, 0, 1}),
                TensorView::strided(lse.data(), DType::kFloat32, {0, H}, {1, 0}));
  const Status st = paged_attention(args, HostMetadata::from_args(args));
  EXPECT_TRUE(st.ok()) << st.to_string();
  ExpectUntouched();
  // The merge too.
  std::vector<float> a(8), la(8);
  const TensorView oa = TensorView::contiguous(a.data(), DType::kFloat32, {0, H, D});
  const TensorView l = TensorView::contiguous(la.data(), DType::kFloat32, {0, H});
  const TensorView o = TensorView::strided(out.data(), DType::kFloat32, {0, H, D}, {D, 0, 1});
  const TensorView lo = TensorView::strided(lse.data(), DType::kFloat32, {0, H}, {1, 0});
  const Status ms = merge_attention_states(oa, l, oa, l, o, lo);
  EXPECT_TRUE(ms.ok()) << ms.to_string();
}
TEST_F(AttentionValidation, OutOnAnotherDevice) {
  args.out.device = Device::cuda(0);
  Expect(StatusCode::kInvalidArgument, "out.device");
}
TEST_F(AttentionValidation, AlibiOnAnotherDevice) {
  args.params.alibi_slopes =
      TensorView::contiguous(alibi.data(), DType::kFloat32, {H}, Device::cuda(0));
  Expect(StatusCode::kInvalidArgument, "alibi_slopes.device");
}
TEST_F(AttentionValidation, CudaTensorsWithoutCudaAreDeviceUnavailable) {
  // Runs in builds without CUDA and in CUDA builds on machines without a GPU.
  if (query_device(Device::cuda(0)).ok()) GTEST_SKIP() << "a GPU is present";
  const Device gpu = Device::cuda(0);
  for (TensorView* t : {&args.query, &args.out, &args.lse, &args.cache.key, &args.cache.value,
                        &args.block_table, &args.seq_lens, &args.query_start_loc})
    t->device = gpu;
  // Host copies of the metadata stay on the CPU, as serving engines keep them.
  HostMetadata host;
  host.block_table = TensorView::contiguous(block_table.data(), DType::kInt32, {2, 2});
  host.seq_lens = TensorView::contiguous(seq_lens.data(), DType::kInt32, {2});
  host.query_start_loc = TensorView::contiguous(qsl.data(), DType::kInt32, {3});
  EXPECT_REJECTED(paged_attention(args, host), StatusCode::kDeviceUnavailable, "CUDA");
  ExpectUntouched();
}

// ---- plan / run consistency
TEST_F(AttentionValidation, PlanOptionsNegative) {
  PlanOptions o;
  o.tile_tokens = -1;
  EXPECT_REJECTED(paged_attention(args, HostMetadata::from_args(args), nullptr, o),
                  StatusCode::kInvalidArgument, "tile_tokens");
  ExpectUntouched();
}
TEST_F(AttentionValidation, RunWithAnEmptyPlan) {
  EXPECT_REJECTED(run_attention(AttentionPlan{}, args, nullptr, 0), StatusCode::kInvalidArgument,
                  "plan");
  ExpectUntouched();
}
TEST_F(AttentionValidation, RunWithArgsOfAnotherShape) {
  auto plan = plan_attention(args, HostMetadata::from_args(args));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  AttentionArgs other = args;
  other.params.sliding_window = 2;  // the plan was made without a window
  std::vector<std::uint8_t> ws(plan->workspace_bytes());
  EXPECT_REJECTED(run_attention(*plan, other, ws.data(), ws.size()), StatusCode::kInvalidArgument,
                  "sliding_window");
  ExpectUntouched();
}
TEST_F(AttentionValidation, RunWithABlockTableOfAnotherWidth) {
  // run_attention documents that args must have the shapes the plan was made for; the block
  // table's width is one of them (a plan's work list was built from the old rows).
  auto plan = plan_attention(args, HostMetadata::from_args(args));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  std::vector<std::int32_t> wide = {3, 6, 0, 1, 0, 0};
  AttentionArgs other = args;
  other.block_table = TensorView::contiguous(wide.data(), DType::kInt32, {2, 3});
  std::vector<std::uint8_t> ws(plan->workspace_bytes());
  EXPECT_REJECTED(run_attention(*plan, other, ws.data(), ws.size()), StatusCode::kInvalidArgument,
                  "block_table.shape[1]");
  ExpectUntouched();
}
TEST_F(AttentionValidation, RunWithNullOutData) {
  auto plan = plan_attention(args, HostMetadata::from_args(args));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  AttentionArgs other = args;
  other.out.data = nullptr;
  std::vector<std::uint8_t> ws(plan->workspace_bytes());
  EXPECT_REJECTED(run_attention(*plan, other, ws.data(), ws.size()), StatusCode::kInvalidArgument,
                  "out.data");
  ExpectUntouched();
}

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

TEST_F(WriteKvValidation, FixtureWritesExactlyTheMappedSlots) {
  ASSERT_TRUE(write_kv(k, v, sm, cache).ok());
  // Slot 5 = block 1, offset 1; slot 17 = block 4, offset 1. Nothing else changes (the skipped
  // row's slot -1 must not wrap to the last slot).
  std::size_t changed = 0;
  for (std::size_t i = 0; i < key_cache.size(); ++i) changed += key_cache[i] != 0x7E00;
  EXPECT_EQ(changed, static_cast<std::size_t>(2 * KVH * D));
  for (int t = 0; t < 2; ++t) {
    const std::int64_t slot = slots[static_cast<std::size_t>(t)];
    for (int e = 0; e < KVH * D; ++e) {
      EXPECT_EQ(key_cache[static_cast<std::size_t>(slot * KVH * D + e)],
                key[static_cast<std::size_t>(t * KVH * D + e)]);
      EXPECT_EQ(value_cache[static_cast<std::size_t>(slot * KVH * D + e)],
                value[static_cast<std::size_t>(t * KVH * D + e)]);
    }
  }
  EXPECT_EQ(key_cache.back(), 0x7E00) << "slot -1 wrapped to the last slot";
}
TEST_F(WriteKvValidation, SlotPastTheCache) {
  slots[1] = NB * BS;
  Expect(StatusCode::kInvalidArgument, "slot_mapping[1]");
}
TEST_F(WriteKvValidation, DuplicateSlots) {
  slots[1] = 5;
  Expect(StatusCode::kInvalidArgument, "one slot");
}
TEST_F(WriteKvValidation, SlotMappingFloatDtype) {
  sm.dtype = DType::kFloat32;
  Expect(StatusCode::kInvalidArgument, "slot_mapping.dtype");
}
TEST_F(WriteKvValidation, SlotMappingWrongNdim) {
  sm = TensorView::contiguous(slots.data(), DType::kInt64, {N, 1});
  Expect(StatusCode::kInvalidArgument, "slot_mapping.ndim");
}
TEST_F(WriteKvValidation, KeyHasFewerRowsThanSlots) {
  k = TensorView::contiguous(key.data(), DType::kFloat16, {N - 1, KVH, D});
  Expect(StatusCode::kInvalidArgument, "key.shape[0]");
}
TEST_F(WriteKvValidation, ValueHasFewerRowsThanSlots) {
  v = TensorView::contiguous(value.data(), DType::kFloat16, {N - 1, KVH, D});
  Expect(StatusCode::kInvalidArgument, "value.shape[0]");
}
TEST_F(WriteKvValidation, KeyDtypeDiffersFromNonFp8Cache) {
  std::vector<float> kf(N * KVH * D, 0.5f);
  k = TensorView::contiguous(kf.data(), DType::kFloat32, {N, KVH, D});
  Expect(StatusCode::kInvalidArgument, "key.dtype");
}
TEST_F(WriteKvValidation, KeyAndValueDtypesDifferForFp8Cache) {
  std::vector<std::uint8_t> k8(NB * BS * KVH * D, 0x7F), v8(NB * BS * KVH * D, 0x7F);
  cache.key = TensorView::contiguous(k8.data(), DType::kFloat8E4M3, {NB, BS, KVH, D});
  cache.value = TensorView::contiguous(v8.data(), DType::kFloat8E4M3, {NB, BS, KVH, D});
  std::vector<float> vf(N * KVH * D, 0.5f);
  v = TensorView::contiguous(vf.data(), DType::kFloat32, {N, KVH, D});
  const std::vector<std::uint8_t> k8_before = k8;
  EXPECT_REJECTED(write_kv(k, v, sm, cache), StatusCode::kInvalidArgument, "value.dtype");
  EXPECT_TRUE(k8 == k8_before);
}
TEST_F(WriteKvValidation, KeyWrongKvHeads) {
  k = TensorView::contiguous(key.data(), DType::kFloat16, {N, 1, D});
  Expect(StatusCode::kInvalidArgument, "key.shape[1]");
}
TEST_F(WriteKvValidation, KeyWrongHeadSize) {
  k = TensorView::contiguous(key.data(), DType::kFloat16, {N, KVH, D / 2});
  Expect(StatusCode::kInvalidArgument, "key.shape[2]");
}
TEST_F(WriteKvValidation, KeyLastDimNotContiguous) {
  k = TensorView::strided(key.data(), DType::kFloat16, {1, KVH, D}, {KVH * D, D, 2});
  Expect(StatusCode::kInvalidArgument, "key.strides[2]");
}
TEST_F(WriteKvValidation, KeyWrongNdim) {
  k = TensorView::contiguous(key.data(), DType::kFloat16, {N, KVH * D});
  Expect(StatusCode::kInvalidArgument, "key.ndim");
}
TEST_F(WriteKvValidation, KeyNullData) {
  k.data = nullptr;
  Expect(StatusCode::kInvalidArgument, "key.data");
}
TEST_F(WriteKvValidation, SlotMappingOnAnotherDevice) {
  sm.device = Device::cuda(0);
  Expect(StatusCode::kInvalidArgument, "slot_mapping.device");
}
TEST_F(WriteKvValidation, KeyOnAnotherDevice) {
  k.device = Device::cuda(0);
  Expect(StatusCode::kInvalidArgument, "key.device");
}
TEST_F(WriteKvValidation, Fp8CacheScaleNotPositive) {
  std::vector<std::uint8_t> k8(NB * BS * KVH * D, 0x7F), v8(NB * BS * KVH * D, 0x7F);
  cache.key = TensorView::contiguous(k8.data(), DType::kFloat8E5M2, {NB, BS, KVH, D});
  cache.value = TensorView::contiguous(v8.data(), DType::kFloat8E5M2, {NB, BS, KVH, D});
  const std::vector<std::uint8_t> k8_before = k8, v8_before = v8;
  cache.k_scale = 0.0f;
  EXPECT_REJECTED(write_kv(k, v, sm, cache), StatusCode::kInvalidArgument, "k_scale");
  cache.k_scale = 1.0f;
  cache.v_scale = -2.0f;
  EXPECT_REJECTED(write_kv(k, v, sm, cache), StatusCode::kInvalidArgument, "v_scale");
  EXPECT_TRUE(k8 == k8_before);
  EXPECT_TRUE(v8 == v8_before);
}
TEST_F(WriteKvValidation, OverlappingCacheBlocks) {
  cache.value.strides[0] = 1;
  Expect(StatusCode::kInvalidArgument, "overlap");
}
TEST_F(WriteKvValidation, KeyAndValueCachesSharingElementsAreRejected) {
  // The value cache one token into the key cache: writing values would overwrite keys.
  cache.value = TensorView::contiguous(key_cache.data() + KVH * D, DType::kFloat16,
                                       {NB - 1, BS, KVH, D});
  cache.key.shape[0] = NB - 1;
  Expect(StatusCode::kInvalidArgument, "shares memory with key_cache");
  // The same view for both.
  cache.value = cache.key;
  Expect(StatusCode::kInvalidArgument, "shares memory with key_cache");
}
TEST_F(WriteKvValidation, KeyAndValuePagesInterleavedInOneBufferAreAccepted) {
  // [blocks, 2, block, heads, head] (K and V halves of each page, as FlashInfer lays them out):
  // the spans meet but no element is shared.
  std::vector<std::uint16_t> pages(2 * NB * BS * KVH * D, 0x7E00);
  cache.key = TensorView::strided(pages.data(), DType::kFloat16, {NB, BS, KVH, D},
                                  {2 * BS * KVH * D, KVH * D, D, 1});
  cache.value = TensorView::strided(pages.data() + BS * KVH * D, DType::kFloat16,
                                    {NB, BS, KVH, D}, {2 * BS * KVH * D, KVH * D, D, 1});
  ASSERT_TRUE(write_kv(k, v, sm, cache).ok());
  // Slot 5 = block 1, offset 1: its key at page 1's K half, its value at page 1's V half.
  const std::size_t k5 = static_cast<std::size_t>(2 * BS * KVH * D + KVH * D);
  const std::size_t v5 = k5 + static_cast<std::size_t>(BS * KVH * D);
  EXPECT_EQ(pages[k5], key[0]);
  EXPECT_EQ(pages[v5], value[0]);
}
TEST_F(WriteKvValidation, Fp8SplitNeedsHeadSizeMultipleOf16) {
  // make_kv_cache is where a split fp8 cache with head 40 is described (x = 16).
  KVCacheSpec spec;
  spec.layout = KVLayout::kSplit;
  spec.num_blocks = 2;
  spec.block_size = 16;
  spec.num_kv_heads = 1;
  spec.head_size = 40;
  spec.dtype = DType::kFloat8E4M3;
  auto c = make_kv_cache(spec, nullptr, nullptr);
  EXPECT_REJECTED(c.status(), StatusCode::kUnsupported, "head_size");
  spec.dtype = DType::kFloat16;  // x = 8 divides 40
  EXPECT_TRUE(make_kv_cache(spec, nullptr, nullptr).ok());
}
TEST_F(WriteKvValidation, NegativeSlotsAnywhereAreSkippedAndExtraRowsIgnored) {
  // CUDA-graph padding: key has more rows than slot_mapping; the count comes from the latter.
  std::vector<std::int64_t> two = {-5, 3};
  sm = TensorView::contiguous(two.data(), DType::kInt64, {2});
  ASSERT_TRUE(write_kv(k, v, sm, cache).ok());
  std::size_t changed = 0;
  for (std::size_t i = 0; i < key_cache.size(); ++i) changed += key_cache[i] != 0x7E00;
  EXPECT_EQ(changed, static_cast<std::size_t>(KVH * D)) << "only row 1 (slot 3) is written";
  EXPECT_EQ(key_cache[3 * KVH * D], key[KVH * D]);
}

// ===================================================================== merge
TEST(MergeValidation, ShapeDtypeAndDeviceRules) {
  std::vector<float> a(2 * 2 * 8, 1.0f), b(2 * 2 * 8, 2.0f), o(2 * 2 * 8, kNaN);
  std::vector<float> la(4, 0.0f), lb(4, 0.0f), lo(4, kNaN);
  const TensorView oa = TensorView::contiguous(a.data(), DType::kFloat32, {2, 2, 8});
  const TensorView ob = TensorView::contiguous(b.data(), DType::kFloat32, {2, 2, 8});
  const TensorView oo = TensorView::contiguous(o.data(), DType::kFloat32, {2, 2, 8});
  const TensorView va = TensorView::contiguous(la.data(), DType::kFloat32, {2, 2});
  const TensorView vb = TensorView::contiguous(lb.data(), DType::kFloat32, {2, 2});
  const TensorView vo = TensorView::contiguous(lo.data(), DType::kFloat32, {2, 2});
  ASSERT_TRUE(merge_attention_states(oa, va, ob, vb, oo, vo).ok());
  o.assign(o.size(), kNaN);
  lo.assign(lo.size(), kNaN);
  const auto o_before = bytes_of(o), lo_before = bytes_of(lo);

  TensorView bad = ob;
  bad.shape[2] = 4;
  EXPECT_REJECTED(merge_attention_states(oa, va, bad, vb, oo, vo), StatusCode::kInvalidArgument,
                  "out_b");
  bad = ob;
  bad.dtype = DType::kFloat16;
  EXPECT_REJECTED(merge_attention_states(oa, va, bad, vb, oo, vo), StatusCode::kInvalidArgument,
                  "out_b.dtype");
  TensorView bad_lse = vb;
  bad_lse.dtype = DType::kFloat16;
  EXPECT_REJECTED(merge_attention_states(oa, va, ob, bad_lse, oo, vo), StatusCode::kInvalidArgument,
                  "lse_b.dtype");
  bad_lse = va;
  bad_lse.shape[1] = 3;
  EXPECT_REJECTED(merge_attention_states(oa, bad_lse, ob, vb, oo, vo), StatusCode::kInvalidArgument,
                  "lse_a.shape[1]");
  bad = oo;
  bad.device = Device::cuda(0);
  EXPECT_REJECTED(merge_attention_states(oa, va, ob, vb, bad, vo), StatusCode::kInvalidArgument,
                  "out.device");
  EXPECT_REJECTED(merge_attention_states(oa, TensorView{}, ob, vb, oo, vo),
                  StatusCode::kInvalidArgument, "lse_a");
  EXPECT_TRUE(bytes_of(o) == o_before);
  EXPECT_TRUE(bytes_of(lo) == lo_before);
}

// ===================================================================== describe / make
TEST(CacheValidation, KvCacheElementsRejectsBadSpecs) {
  KVCacheSpec spec;
  spec.num_blocks = 4;
  EXPECT_TRUE(kv_cache_elements(spec).ok());
  KVCacheSpec s = spec;
  s.num_blocks = 0;
  EXPECT_REJECTED(kv_cache_elements(s).status(), StatusCode::kInvalidArgument, "num_blocks");
  s = spec;
  s.block_size = 0;
  EXPECT_REJECTED(kv_cache_elements(s).status(), StatusCode::kInvalidArgument, "block_size");
  s = spec;
  s.page_pad = -1;
  EXPECT_REJECTED(kv_cache_elements(s).status(), StatusCode::kInvalidArgument, "page_pad");
  s = spec;
  s.num_blocks = std::int64_t{1} << 62;
  EXPECT_REJECTED(kv_cache_elements(s).status(), StatusCode::kInvalidArgument, "overflow");
}

TEST(CacheValidation, ParseRejectsUnknownNames) {
  EXPECT_REJECTED(parse_layout("NHD ").status(), StatusCode::kInvalidArgument, "layout");
  EXPECT_REJECTED(parse_dtype("float16").status(), StatusCode::kInvalidArgument, "float16");
}

}  // namespace
}  // namespace pagedattn

// ---- outputs whose elements overlap (a stride-0 token dimension, lse inside out): several
// results would race for one address, so the call is rejected before it writes anything.
namespace pagedattn {
namespace {
TEST_F(AttentionValidation, OutWithOverlappingRowsIsRejected) {
  args.out = TensorView::strided(out.data(), DType::kFloat16, {T, H, D}, {0, D, 1});
  Expect(StatusCode::kInvalidArgument, "out");
}
TEST_F(AttentionValidation, LseWithOverlappingRowsIsRejected) {
  args.lse = TensorView::strided(lse.data(), DType::kFloat32, {T, H}, {1, 1});
  Expect(StatusCode::kInvalidArgument, "lse");
}
}  // namespace
}  // namespace pagedattn

// ---- written tensors that share memory with an input: an output that partly overlaps the
// query (or a merge input) would read rows another row already overwrote, a silently wrong
// answer. Only an exact alias (the same view) is allowed where the docs say so; element-
// disjoint views interleaved in one buffer stay legal.
namespace pagedattn {
namespace {

TEST_F(AttentionValidation, OutExactlyAliasingTheQueryIsAccepted) {
  args.out = args.query;
  const Status st = paged_attention(args, HostMetadata::from_args(args));
  EXPECT_TRUE(st.ok()) << st.to_string();
}

TEST_F(AttentionValidation, OutShiftedByOneHeadInsideTheQueryIsRejected) {
  // out starts one head after the query in the same buffer (the buffer is large enough).
  std::vector<std::uint16_t> buf(T * H * D + D);
  std::memcpy(buf.data(), query.data(), query.size() * 2);
  args.query = TensorView::contiguous(buf.data(), DType::kFloat16, {T, H, D});
  args.out = TensorView::contiguous(buf.data() + D, DType::kFloat16, {T, H, D});
  const auto before = bytes_of(buf);
  EXPECT_REJECTED(paged_attention(args, HostMetadata::from_args(args)),
                  StatusCode::kInvalidArgument, "shares memory with query");
  EXPECT_TRUE(bytes_of(buf) == before) << "a rejected call wrote into the query/out buffer";
}

TEST_F(AttentionValidation, OutStartingRowsBeforeTheQueryIsRejected) {
  for (int rows_before : {1, 2}) {
    std::vector<std::uint16_t> buf((T + rows_before) * H * D);
    std::memcpy(buf.data() + rows_before * H * D, query.data(), query.size() * 2);
    args.query = TensorView::contiguous(buf.data() + rows_before * H * D, DType::kFloat16, {T, H, D});
    args.out = TensorView::contiguous(buf.data(), DType::kFloat16, {T, H, D});
    EXPECT_REJECTED(paged_attention(args, HostMetadata::from_args(args)),
                    StatusCode::kInvalidArgument, "shares memory with query");
  }
}

TEST_F(AttentionValidation, QueryAndOutInterleavedInOnePackedBufferAreAccepted) {
  // [T, 2, H, D]: query = [:, 0], out = [:, 1]. The byte spans meet, the elements never do.
  std::vector<std::uint16_t> buf(T * 2 * H * D, 0x7E00);
  for (int t = 0; t < T; ++t)
    std::memcpy(buf.data() + t * 2 * H * D, query.data() + t * H * D, H * D * 2);
  args.query = TensorView::strided(buf.data(), DType::kFloat16, {T, H, D}, {2 * H * D, D, 1});
  args.out = TensorView::strided(buf.data() + H * D, DType::kFloat16, {T, H, D}, {2 * H * D, D, 1});
  const Status st = paged_attention(args, HostMetadata::from_args(args));
  ASSERT_TRUE(st.ok()) << st.to_string();
  for (int t = 0; t < T; ++t)  // the query half is untouched
    EXPECT_EQ(std::memcmp(buf.data() + t * 2 * H * D, query.data() + t * H * D, H * D * 2), 0);
}

TEST_F(AttentionValidation, OutInsideTheKeyCacheIsRejected) {
  args.out = TensorView::contiguous(key_cache.data() + 64, DType::kFloat16, {T, H, D});
  EXPECT_REJECTED(paged_attention(args, HostMetadata::from_args(args)),
                  StatusCode::kInvalidArgument, "key_cache");
  EXPECT_TRUE(bytes_of(key_cache) == key_before) << "key cache changed";
}

TEST_F(AttentionValidation, LseInsideOutIsRejected) {
  args.lse = TensorView::contiguous(out.data() + 8, DType::kFloat32, {T, H});
  Expect(StatusCode::kInvalidArgument, "lse");
}

TEST_F(AttentionValidation, LseOverlappingTheSinksIsRejected) {
  std::vector<float> buf(T * H + H, 0.5f);
  args.params.sinks = TensorView::contiguous(buf.data(), DType::kFloat32, {H});
  args.lse = TensorView::contiguous(buf.data() + 1, DType::kFloat32, {T, H});
  EXPECT_REJECTED(paged_attention(args, HostMetadata::from_args(args)),
                  StatusCode::kInvalidArgument, "sinks");
}

TEST(MergeValidation, OutPartlyOverlappingAnInputIsRejectedExactAliasIsNot) {
  constexpr int T = 2, H = 2, D = 8;
  std::vector<float> a(T * H * D + D, 1.0f), b(T * H * D, 2.0f);
  std::vector<float> la(T * H, 0.0f), lb(T * H, 0.0f), lo(T * H, kNaN);
  const TensorView oa = TensorView::contiguous(a.data(), DType::kFloat32, {T, H, D});
  const TensorView ob = TensorView::contiguous(b.data(), DType::kFloat32, {T, H, D});
  const TensorView va = TensorView::contiguous(la.data(), DType::kFloat32, {T, H});
  const TensorView vb = TensorView::contiguous(lb.data(), DType::kFloat32, {T, H});
  const TensorView vo = TensorView::contiguous(lo.data(), DType::kFloat32, {T, H});
  const TensorView shifted = TensorView::contiguous(a.data() + D, DType::kFloat32, {T, H, D});
  const auto a_before = bytes_of(a);
  EXPECT_REJECTED(merge_attention_states(oa, va, ob, vb, shifted, vo),
                  StatusCode::kInvalidArgument, "shares memory with out_a");
  EXPECT_TRUE(bytes_of(a) == a_before);
  // lse_out one row into lse_a: rejected; exactly lse_a: accepted (each row is read first).
  std::vector<float> la2(T * H + 1, 0.0f);
  const TensorView va2 = TensorView::contiguous(la2.data(), DType::kFloat32, {T, H});
  const TensorView vo2 = TensorView::contiguous(la2.data() + 1, DType::kFloat32, {T, H});
  std::vector<float> o(T * H * D, kNaN);
  const TensorView oo = TensorView::contiguous(o.data(), DType::kFloat32, {T, H, D});
  EXPECT_REJECTED(merge_attention_states(oa, va2, ob, vb, oo, vo2), StatusCode::kInvalidArgument,
                  "lse_out");
  ASSERT_TRUE(merge_attention_states(oa, va, ob, vb, oa, va).ok());
  for (int i = 0; i < T * H * D; ++i) ASSERT_FLOAT_EQ(a[i], 1.5f) << i;
  for (int i = 0; i < T * H; ++i) ASSERT_NEAR(la[i], std::log(2.0f), 1e-6f) << i;
}

TEST_F(WriteKvValidation, NewKeysInsideTheCacheAreRejected) {
  k = TensorView::contiguous(key_cache.data() + 3 * BS * KVH * D, DType::kFloat16, {N, KVH, D});
  Expect(StatusCode::kInvalidArgument, "shares memory");
}

// ---- views that are malformed in themselves
TEST(TensorViewValidation, NdimAboveTheMaximumIsDescribedWithoutReadingPastTheArrays) {
  std::vector<float> q(4 * 8 * 64);
  TensorView v = TensorView::contiguous(q.data(), DType::kFloat32, {4, 8, 64});
  v.ndim = kMaxDims + 1;
  const std::string d = v.describe();
  EXPECT_NE(d.find("outside"), std::string::npos) << d;
  EXPECT_EQ(v.numel(), 0);
  AttentionArgs a;
  a.query = v;
  const Status st = paged_attention(a, HostMetadata::from_args(a));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find("query.ndim"), std::string::npos) << st.message();
}

TEST(TensorViewValidation, DlpackWithNullShapeIsRejected) {
  float x[4] = {};
  DLTensor t{};
  t.data = x;
  t.ndim = 2;
  t.shape = nullptr;
  t.dtype.code = kDLFloat;
  t.dtype.bits = 32;
  t.dtype.lanes = 1;
  t.device.device_type = kDLCPU;
  EXPECT_REJECTED(from_dlpack(t).status(), StatusCode::kInvalidArgument, "shape is null");
}

}  // namespace
}  // namespace pagedattn
