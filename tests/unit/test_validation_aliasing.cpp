// Negative tests, one per validation rule (DESIGN.md §3 "Errors", §4 "Negative tests"): each
// asserts the exact StatusCode, a message fragment naming the argument, and that the call
// changed nothing (cache, out and lse bytes are compared before and after). Each fixture first
// proves that its unmodified arguments are accepted, so every rejection below is caused by the
// one thing the test breaks.
//
// This file: outputs whose elements overlap, written tensors that share memory with an
// input, and views that are malformed in themselves.
#include "tests/unit/validation_fixtures.h"

// ---- outputs whose elements overlap (a stride-0 token dimension, lse inside out): several
// results would race for one address, so the call is rejected before it writes anything.
namespace pagedattn {
namespace {

using namespace validation_test;  // NOLINT: the fixtures, helpers and constants

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

using namespace validation_test;  // NOLINT: the fixtures, helpers and constants


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
